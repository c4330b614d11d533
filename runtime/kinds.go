package runtime

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/pgtask/pgtask/gen"
)

// UnhandledKind is a kind with runnable jobs in a queue where no live
// worker has a handler for it. Workers claim only the kinds they handle,
// so such jobs wait (a worker of the release that adds the kind is not
// running yet, or the handler was never registered, or no worker serves
// the queue).
type UnhandledKind struct {
	Queue string
	Kind  string
	// Jobs is how many of its jobs could run now.
	Jobs int64
	// OldestWait is how long the oldest of them has waited since it could
	// run.
	OldestWait time.Duration
}

// UnhandledKinds reports, by queue and kind, the runnable jobs that no
// live worker handles. Workers record the kinds they handle, in each queue
// they serve, when Run starts; a worker counts as long as its process
// holds a session. Its cost grows with the runnable jobs, not the backlog
// of finished ones.
func UnhandledKinds(ctx context.Context, db DB) ([]UnhandledKind, error) {
	rows, err := gen.New(db).UnhandledKinds(ctx)
	if err != nil {
		return nil, fmt.Errorf("unhandled kinds: %w", err)
	}
	out := make([]UnhandledKind, len(rows))
	for i, r := range rows {
		out[i] = UnhandledKind{Queue: r.Queue, Kind: r.Kind, Jobs: r.Jobs,
			OldestWait: time.Duration(r.OldestWaitSeconds * float64(time.Second))}
	}
	return out, nil
}

// recordKinds records, through q, the kinds the worker claims in each
// queue it serves, for UnhandledKinds. A failure is only logged: the worker
// works the same.
func (w *Worker) recordKinds(ctx context.Context, q *gen.Queries) {
	rctx, cancel := bookCtx(ctx)
	defer cancel()
	err := q.RecordWorkerKinds(rctx, gen.RecordWorkerKindsParams{
		WorkerID: w.id, Queues: slices.Sorted(maps.Keys(w.queues)), Kinds: w.claimKinds,
	})
	if err != nil && ctx.Err() == nil {
		w.log.Warn("pgtask: could not record the kinds this worker handles; they may be reported as unhandled", "error", err)
	}
}
