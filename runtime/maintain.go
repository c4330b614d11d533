package runtime

import (
	"context"
	"time"

	"github.com/pgtask/pgtask/gen"
)

// maintainBatch bounds the rows one maintenance statement touches.
const maintainBatch = 1000

// maintain periodically moves due scheduled jobs (delayed jobs and retries
// waiting out their backoff) to their queue, requeues jobs whose worker's
// session ended mid-attempt, takes over leased jobs whose lease ran out,
// and moves on groups whose finished head was left
// in place (an enqueue was in flight, or the worker died). Every worker does this; SKIP LOCKED keeps them
// from getting in each other's way.
func (w *Worker) maintain(ctx context.Context) {
	t := time.NewTicker(w.cfg.MaintenanceInterval)
	defer t.Stop()
	q := gen.New(w.pool)
	failing := false
	for {
		err := w.maintainOnce(ctx, q)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			w.log.Warn("pgtask: maintenance failed; will retry", "error", err)
			failing = true
		case err == nil && failing:
			w.log.Info("pgtask: maintenance recovered")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *Worker) maintainOnce(ctx context.Context, q *gen.Queries) error {
	ctx, cancel := context.WithTimeout(ctx, bookkeeping)
	defer cancel()
	for {
		moved, err := q.PromoteScheduled(ctx, maintainBatch)
		if err != nil {
			return err
		}
		if moved < maintainBatch {
			break
		}
	}
	rescued, err := q.RescueOrphans(ctx, gen.RescueOrphansParams{Max: maintainBatch, WorkerID: w.id})
	if err != nil {
		return err
	}
	if len(rescued) > 0 {
		w.log.Warn("pgtask: requeued jobs whose worker died mid-attempt", "jobs", rescued)
	}
	expired, err := q.ExpireLeases(ctx, gen.ExpireLeasesParams{Max: maintainBatch, WorkerID: w.id})
	if err != nil {
		return err
	}
	if len(expired) > 0 {
		w.log.Warn("pgtask: took over jobs whose lease ran out while their worker lived", "jobs", expired)
	}
	if _, err := q.AdvanceFinishedGroups(ctx, maintainBatch); err != nil {
		return err
	}
	return nil
}
