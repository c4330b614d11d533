// Enqueueing one task's value with another task's function does not compile.
package main

import (
	"context"

	"github.com/pgtask/pgtask/cmd/pgtask/internal/codegen/testdata/golden/basic"
)

func main() {
	// want: cannot use basic.ResizeImage{} (value of struct type basic.ResizeImage) as basic.SendEmail value in argument to basic.EnqueueSendEmail
	basic.EnqueueSendEmail(context.Background(), nil, basic.ResizeImage{})
}
