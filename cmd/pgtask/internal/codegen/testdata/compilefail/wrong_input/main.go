// A step's input reads its parent's result with the parent's result type:
// a step whose result is of another type cannot feed it.
package main

import (
	"github.com/pgtask/pgtask/cmd/pgtask/internal/codegen/testdata/golden/workflows"
	"github.com/pgtask/pgtask/runtime"
)

func main() {
	wf := runtime.NewWorkflow("import")
	f := workflows.AddFetch(wf, workflows.Fetch{URL: "https://example.com"})
	p := workflows.AddParse(wf, workflows.Parse{Page: f.Output()})
	// want: cannot use p.Output() (value of struct type "github.com/pgtask/pgtask/runtime".Input[workflows.Doc]) as "github.com/pgtask/pgtask/runtime".Input[workflows.Page] value in struct literal
	workflows.AddParse(wf, workflows.Parse{Page: p.Output()})
}
