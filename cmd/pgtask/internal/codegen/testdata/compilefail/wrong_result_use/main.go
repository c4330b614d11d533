// A task's result reads back with its declared type.
package main

import (
	"context"

	"github.com/pgtask/pgtask/cmd/pgtask/internal/codegen/testdata/golden/basic"
)

func main() {
	var s string
	// want: cannot use basic.GetAddResult(context.Background(), nil, 1) (value of type int) as string value in assignment
	s, _, _ = basic.GetAddResult(context.Background(), nil, 1)
	_ = s
}
