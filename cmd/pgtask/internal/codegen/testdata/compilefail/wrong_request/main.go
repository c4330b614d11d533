// A request, such as a batch's callback, is built from its own task only.
package main

import (
	"github.com/pgtask/pgtask/cmd/pgtask/internal/codegen/testdata/golden/basic"
	"github.com/pgtask/pgtask/runtime"
)

func main() {
	// want: cannot use basic.ResizeImage{} (value of struct type basic.ResizeImage) as basic.SendEmail value in argument to basic.RequestSendEmail
	done, _ := basic.RequestSendEmail(basic.ResizeImage{})
	_ = runtime.BatchOptions{OnFinish: &done}
}
