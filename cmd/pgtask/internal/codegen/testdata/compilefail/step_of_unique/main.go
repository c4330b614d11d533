// A unique task is no workflow's step: a workflow refuses unique steps
// (their key could name another's job), and its key cannot be cleared.
package main

import (
	"github.com/pgtask/pgtask/cmd/pgtask/internal/codegen/testdata/golden/options"
	"github.com/pgtask/pgtask/runtime"
)

func main() {
	wf := runtime.NewWorkflow("w")
	// want: undefined: options.AddSync
	options.AddSync(wf, options.Sync{})
	// want: undefined: options.AddInvite
	options.AddInvite(wf, options.Invite{})
}
