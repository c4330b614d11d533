// A unique task has no typed batch: a batch's jobs cannot be unique.
package main

import (
	"context"

	"github.com/pgtask/pgtask/cmd/pgtask/internal/codegen/testdata/golden/options"
	"github.com/pgtask/pgtask/runtime"
)

func main() {
	// want: undefined: options.EnqueueSyncBatch
	options.EnqueueSyncBatch(context.Background(), nil, []options.Sync{{}}, runtime.BatchOptions{})
	// want: undefined: options.EnqueueInviteBatch
	options.EnqueueInviteBatch(context.Background(), nil, []options.Invite{{}}, runtime.BatchOptions{})
}
