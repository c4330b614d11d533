// A typed batch takes a slice of its own task, nothing else.
package main

import (
	"context"

	"github.com/pgtask/pgtask/cmd/pgtask/internal/codegen/testdata/golden/basic"
	"github.com/pgtask/pgtask/runtime"
)

func main() {
	// want: cannot use []basic.ResizeImage{} (value of type []basic.ResizeImage) as []basic.SendEmail value in argument to basic.EnqueueSendEmailBatch
	basic.EnqueueSendEmailBatch(context.Background(), nil, []basic.ResizeImage{}, runtime.BatchOptions{})
}
