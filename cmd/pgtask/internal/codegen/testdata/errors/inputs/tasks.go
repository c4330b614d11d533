package inputs

import "github.com/pgtask/pgtask/runtime"

type Page struct {
	runtime.TaskWithResult[string] `task:"page"`
}

type Pages struct {
	Prev runtime.Input[string]
}

type FanIn struct {
	runtime.Task `task:"fan_in"`
	All          []runtime.Input[string]
	One          *runtime.Input[string]
	Nested       Pages
	ByName       map[string]runtime.Input[string]
	Fine         runtime.Input[string]
}

// A task with inputs is enqueued only as a workflow's step, which cannot
// be unique.
type UniqueStep struct {
	runtime.Task `task:"unique_step,unique=payload"`
	Prev         runtime.Input[string]
}

type UniqueFieldStep struct {
	runtime.Task `task:"unique_field_step"`
	Name         string `task:"unique"`
	Prev         runtime.Input[string]
}
