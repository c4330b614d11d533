// A handler for another task's payload does not compile.
package main

import (
	"context"

	"github.com/pgtask/pgtask/cmd/pgtask/internal/codegen/testdata/golden/basic"
	"github.com/pgtask/pgtask/runtime"
)

func main() {
	var w *runtime.Worker
	// want: in argument to basic.HandleSendEmail
	// want: t basic.ResizeImage) error) as func(ctx context.Context, job *"github.com/pgtask/pgtask/runtime".Job, t basic.SendEmail) error value
	basic.HandleSendEmail(w, func(ctx context.Context, job *runtime.Job, t basic.ResizeImage) error { return nil })
}
