package kinds

import "github.com/pgtask/pgtask/runtime"

type SendEmail struct {
	runtime.Task
}

type Mail struct {
	runtime.Task `task:"send_email"`
}

type Pointer struct {
	*runtime.Task
}

type Both struct {
	runtime.Task
	runtime.TaskWithResult[int]
}
