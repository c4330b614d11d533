// Package benchtasks declares the no-op tasks pgtask-bench enqueues and works.
package benchtasks

import "github.com/pgtask/pgtask/runtime"

//go:generate go run github.com/pgtask/pgtask/cmd/pgtask gen

// Noop is an ungrouped job that does nothing.
type Noop struct {
	runtime.Task `task:"bench_noop,queue=bench"`
	N            int `json:"n"`
}

// GroupedNoop does nothing, one at a time per group.
type GroupedNoop struct {
	runtime.Task `task:"bench_grouped_noop,queue=bench"`
	Group        int `json:"g" task:"group"`
	N            int `json:"n"`
}

// Sleep sleeps for Ms milliseconds.
type Sleep struct {
	runtime.Task `task:"bench_sleep,queue=bench"`
	Ms           int `json:"ms"`
}
