package runtime

import (
	"context"
	"time"

	"github.com/pgtask/pgtask/gen"
)

// maintainBatch bounds the rows one maintenance statement touches.
const maintainBatch = 1000

// A maintService is one duty of the maintenance loop that every worker
// does each round (promotion, rescue, cancel requests). Its step does one
// round of it; an error ends the round, and the loop tries again the next.
type maintService interface {
	step(ctx context.Context) error
}

// leaderStatus tells the leader-only services (retention, periodic jobs)
// whether this worker leads now: the leader service does.
type leaderStatus interface {
	isLeader() bool
}

// maintenance holds the worker's maintenance services. The loop (maintain)
// runs them, one after another, on the connection budget's maintenance
// share.
type maintenance struct {
	promote  *promoter
	rescue   *rescuer
	cancel   *canceller
	leader   *leader
	retain   *retainer
	periodic *periodicScheduler
}

// newMaintenance makes the maintenance services of w, whose pool is set.
func newMaintenance(w *Worker) *maintenance {
	q := gen.New(w.pool)
	lead := &leader{q: q, log: w.log.With("maint", "leader"), workerID: w.id, term: w.term(), every: electEveryTicks}
	return &maintenance{
		promote: &promoter{q: q, log: w.log.With("maint", "promote"), batch: maintainBatch},
		rescue: &rescuer{pool: w.pool, q: q, log: w.log.With("maint", "rescue"), batch: maintainBatch,
			workerID: w.id, claims: &w.claims},
		cancel: &canceller{q: q, log: w.log.With("maint", "cancel"), batch: maintainBatch, running: &w.running},
		leader: lead,
		periodic: &periodicScheduler{pool: w.pool, log: w.log.With("maint", "periodic"), leader: lead, every: electEveryTicks,
			jobs: func() []*periodic {
				w.mu.RLock()
				defer w.mu.RUnlock()
				return w.periodic
			}},
		retain: &retainer{q: q, log: w.log.With("maint", "retention"), cfg: w.cfg.Retention, batch: retentionBatch, leader: lead},
	}
}

// maintain periodically moves due scheduled jobs (delayed jobs and retries
// waiting out their backoff) to their queue, requeues jobs whose worker's
// session ended mid-attempt, takes over leased jobs whose lease ran out,
// and moves on groups whose finished head was left in place (an enqueue was
// in flight, or the worker died). Every worker does this; SKIP LOCKED keeps
// them from getting in each other's way. Between rounds, on the same
// connection, it stands for leader and does the leader's duties (see
// leadership).
func (w *Worker) maintain(ctx context.Context) {
	t := time.NewTicker(w.cfg.MaintenanceInterval)
	defer t.Stop()
	q := gen.New(w.pool)
	lead := &leadership{w: w, q: q}
	defer w.maint.leader.resign(ctx)
	failing := false
	for {
		err := w.maintainOnce(ctx, q)
		w.maint.leader.step(ctx)
		lead.step(ctx)
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
	if err := w.maint.promote.step(ctx); err != nil {
		return err
	}
	if err := w.maint.rescue.step(ctx); err != nil {
		return err
	}
	return w.maint.cancel.step(ctx)
}
