package runtime

import (
	"context"
	"log/slog"
	"slices"

	"github.com/pgtask/pgtask/gen"
)

// canceller carries out operators' cancel requests. Every maintenance
// round it settles the requests whose attempt is over (see
// pgtask.apply_cancel_requests) and cancels the running attempts of this
// worker that have a request: the fallback for notifications lost while
// the listener was down. A notification heard (see Worker.cancelNotified)
// is confirmed at once (confirm).
type canceller struct {
	q     *gen.Queries
	log   *slog.Logger
	batch int32
	// running are the attempts whose handlers run in this worker.
	running *runningJobs
}

func (c *canceller) step(ctx context.Context) error {
	if _, err := c.q.ApplyCancelRequests(ctx, c.batch); err != nil {
		return err
	}
	refs := c.running.attempts()
	if len(refs) == 0 {
		return nil
	}
	return c.cancelRequested(ctx, refs)
}

// confirm cancels attempt ref, running here, if the database shows an
// operator's request for it. Failing to ask, it leaves the attempt to
// the next step, which asks again.
func (c *canceller) confirm(ctx context.Context, ref attemptRef) {
	ctx, cancel := context.WithTimeout(ctx, bookkeeping)
	defer cancel()
	if err := c.cancelRequested(ctx, []attemptRef{ref}); err != nil {
		c.log.Warn("pgtask: could not check a cancel notification; maintenance will", "job_id", ref.id, "error", err)
	}
}

// cancelRequested cancels those of the attempts refs, running here, that an
// operator asked to cancel; it returns the error of asking the database.
// An attempt that ended meanwhile is left alone.
func (c *canceller) cancelRequested(ctx context.Context, refs []attemptRef) error {
	p := gen.CancelRequestedParams{Ids: make([]int64, len(refs)), Attempts: make([]int32, len(refs))}
	for i, ref := range refs {
		p.Ids[i], p.Attempts[i] = int64(ref.id), int32(ref.attempt)
	}
	requested, err := c.q.CancelRequested(ctx, p)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		if slices.Contains(requested, int64(ref.id)) && c.running.cancel(ref) {
			c.log.Info("pgtask: cancelling a running job at an operator's request", "job_id", ref.id, "attempt", ref.attempt)
		}
	}
	return nil
}
