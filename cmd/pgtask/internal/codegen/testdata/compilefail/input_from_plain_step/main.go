// A step of a task without a result has no Output to feed an input.
package main

import (
	"github.com/pgtask/pgtask/cmd/pgtask/internal/codegen/testdata/golden/workflows"
	"github.com/pgtask/pgtask/runtime"
)

func main() {
	wf := runtime.NewWorkflow("import")
	m := workflows.AddMerge(wf, workflows.Merge{})
	// want: m.Output undefined (type "github.com/pgtask/pgtask/runtime".Step has no field or method Output)
	workflows.AddParse(wf, workflows.Parse{Page: m.Output()})
}
