// A task with runtime.Input fields is enqueued only as a workflow's step:
// a job enqueued on its own, alone, many at once or as a batch, has no
// parents for its inputs to name. Only Add<T> is generated for it.
package main

import (
	"context"

	"github.com/pgtask/pgtask/cmd/pgtask/internal/codegen/testdata/golden/workflows"
	"github.com/pgtask/pgtask/runtime"
)

func main() {
	ctx := context.Background()
	// want: undefined: workflows.EnqueueMerge
	workflows.EnqueueMerge(ctx, nil, workflows.Merge{})
	// want: undefined: workflows.EnqueueMergeMany
	workflows.EnqueueMergeMany(ctx, nil, []workflows.Merge{{}})
	// want: undefined: workflows.EnqueueParseBatch
	workflows.EnqueueParseBatch(ctx, nil, []workflows.Parse{{}}, runtime.BatchOptions{})
}
