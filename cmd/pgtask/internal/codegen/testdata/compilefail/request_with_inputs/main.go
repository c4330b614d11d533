// A task with runtime.Input fields has no request: a request carries no
// dependencies, so its inputs would name no parent. It is a workflow's
// step, added with Add<T>.
package main

import (
	"github.com/pgtask/pgtask/cmd/pgtask/internal/codegen/testdata/golden/workflows"
	"github.com/pgtask/pgtask/runtime"
)

func main() {
	// want: undefined: workflows.RequestParse
	done, _ := workflows.RequestParse(workflows.Parse{})
	_ = runtime.BatchOptions{OnFinish: &done}
}
