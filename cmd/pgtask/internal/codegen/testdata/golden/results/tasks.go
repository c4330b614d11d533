// Package results covers result types: from another package, pointers,
// slices, maps and generic types.
package results

import (
	"github.com/pgtask/pgtask/cmd/pgtask/internal/codegen/testdata/golden/results/receipt"
	"github.com/pgtask/pgtask/runtime"
)

type Pair[K comparable, V any] struct {
	Key K
	Val V
}

type Pay struct {
	runtime.TaskWithResult[*receipt.Receipt] `task:"pay"`
	Cents                                    int64 `json:"cents"`
}

type Tags struct {
	runtime.TaskWithResult[[]string] `task:"tags"`
}

type Count struct {
	runtime.TaskWithResult[map[string][]int64] `task:"count"`
}

type Lookup struct {
	runtime.TaskWithResult[Pair[string, receipt.Receipt]] `task:"lookup"`
	Key                                                   string `json:"key" task:"group"`
}
