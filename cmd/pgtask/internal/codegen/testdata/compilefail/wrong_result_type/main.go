// A handler that returns the wrong result type does not compile.
package main

import (
	"context"

	"github.com/pgtask/pgtask/cmd/pgtask/internal/codegen/testdata/golden/basic"
	"github.com/pgtask/pgtask/runtime"
)

func main() {
	var w *runtime.Worker
	// want: in argument to basic.HandleAdd
	// want: as func(ctx context.Context, job *"github.com/pgtask/pgtask/runtime".Job, t basic.Add) (int, error) value
	basic.HandleAdd(w, func(ctx context.Context, job *runtime.Job, t basic.Add) (string, error) { return "", nil })
}
