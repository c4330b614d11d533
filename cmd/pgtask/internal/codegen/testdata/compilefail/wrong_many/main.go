// The Many variant takes a slice of the task, nothing else.
package main

import (
	"context"

	"github.com/pgtask/pgtask/cmd/pgtask/internal/codegen/testdata/golden/basic"
)

func main() {
	// want: cannot use []basic.ResizeImage{} (value of type []basic.ResizeImage) as []basic.SendEmail value in argument to basic.EnqueueSendEmailMany
	basic.EnqueueSendEmailMany(context.Background(), nil, []basic.ResizeImage{})
}
