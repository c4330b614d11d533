package unexported

import "github.com/pgtask/pgtask/runtime"

type sendEmail struct {
	runtime.Task
}

type Generic[T any] struct {
	runtime.Task
	V T
}
