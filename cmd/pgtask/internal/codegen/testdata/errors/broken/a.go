package broken

import "github.com/pgtask/pgtask/runtime"

type A struct {
	runtime.Task
	N int
}

var x int = "one"
