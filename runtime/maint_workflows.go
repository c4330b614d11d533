package runtime

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/pgtask/pgtask/gen"
)

// workflowKeeper applies, each maintenance round, the notes a workflow
// step's finisher left for a child whose waits row another finisher held
// (see pgtask.workflow_settle), and goes on cancelling the steps of
// cancelled workflows that could not all be cancelled at once. The notes
// are normally applied sooner: by the next finisher of the child's
// parents, or right after the commit that left them, when the listener
// hears of them (notified).
type workflowKeeper struct {
	q     *gen.Queries
	log   *slog.Logger
	batch int32
	// kick wakes the goroutine that applies notified notes at once; the
	// children to look at are in pending, or all of them.
	kick    chan struct{}
	mu      sync.Mutex
	pending []int64
	all     bool
}

func (k *workflowKeeper) step(ctx context.Context) error {
	if _, err := k.q.ApplyWorkflowNotes(ctx, gen.ApplyWorkflowNotesParams{Max: k.batch}); err != nil {
		return err
	}
	_, err := k.q.CancelPendingWorkflows(ctx, k.batch)
	return err
}

// notified takes a "pgtask_workflow" notification's ids for the applier.
func (k *workflowKeeper) notified(payload string) {
	var ids []int64
	for _, f := range strings.Split(payload, ",") {
		if id, err := strconv.ParseInt(f, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	k.mu.Lock()
	if len(k.pending)+len(ids) > int(k.batch) {
		// Too many to name: the applier looks at every child's notes.
		k.all = true
		k.pending = nil
	} else if !k.all {
		k.pending = append(k.pending, ids...)
	}
	k.mu.Unlock()
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

// applyNotified applies the notes of the children that notifications
// named since it last ran (maintenance's loop runs it when kicked). A
// failure is left to the next round.
func (k *workflowKeeper) applyNotified(ctx context.Context) {
	k.mu.Lock()
	ids, all := k.pending, k.all
	k.pending, k.all = nil, false
	k.mu.Unlock()
	if len(ids) == 0 && !all {
		return
	}
	p := gen.ApplyWorkflowNotesParams{Children: ids, Max: k.batch}
	if all {
		p.Children = nil
	}
	actx, cancel := context.WithTimeout(ctx, bookkeeping)
	defer cancel()
	if _, err := k.q.ApplyWorkflowNotes(actx, p); err != nil && ctx.Err() == nil {
		k.log.Debug("pgtask: applying workflow notes failed; the next round will", "error", err)
	}
}
