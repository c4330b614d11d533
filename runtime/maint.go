package runtime

import (
	"context"
	"fmt"
	"sync"
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

// maintenance holds the worker's maintenance services. The loop (maintain)
// runs them, one after another, on the connection budget's maintenance
// share.
type maintenance struct {
	promote *promoter
}

// newMaintenance makes the maintenance services of w, whose pool is set.
func newMaintenance(w *Worker) *maintenance {
	q := gen.New(w.pool)
	return &maintenance{
		promote: &promoter{q: q, log: w.log.With("maint", "promote"), batch: maintainBatch},
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
	defer lead.resign(ctx)
	failing := false
	for {
		err := w.maintainOnce(ctx, q)
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
	if err := w.cancelPending(ctx, q); err != nil {
		return err
	}
	return w.rescueOwnOrphans(ctx)
}

// claimTokens is a set of claim tokens, safe for concurrent use.
type claimTokens struct {
	mu   sync.Mutex
	held map[int64]struct{}
}

func (c *claimTokens) add(token int64) {
	c.mu.Lock()
	c.held[token] = struct{}{}
	c.mu.Unlock()
}

func (c *claimTokens) drop(tokens ...int64) {
	c.mu.Lock()
	for _, t := range tokens {
		delete(c.held, t)
	}
	c.mu.Unlock()
}

func (c *claimTokens) holds(token int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.held[token]
	return ok
}

// rescueOwnOrphans rescues this worker's own held-mode jobs whose session
// is gone and that none of its runners holds any more: a claim that
// committed on the server after its runner gave up waiting for the reply
// (and so after the runner handed back what its session held), or a lost
// batch the runner could not record. Other workers leave them alone while
// this one lives, and nothing else would ever move them, or their groups, on.
//
// The rows are locked first and the tokens checked after: a runner marks a
// claim's token as held before it sends the claim, and forgets it only when
// it is done with every job the claim took, so a job whose token is not held
// once its row is locked has no handler of this worker running it.
func (w *Worker) rescueOwnOrphans(ctx context.Context) error {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	q := gen.New(tx)
	found, err := q.OwnOrphans(ctx, gen.OwnOrphansParams{WorkerID: w.id, Max: maintainBatch})
	if err != nil || len(found) == 0 {
		return err
	}
	var ids []int64
	for _, o := range found {
		if !w.claims.holds(o.Token) {
			ids = append(ids, o.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rescued, err := q.RescueJobs(ctx, ids)
	if err != nil {
		return fmt.Errorf("rescue jobs of lost sessions: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	w.log.Warn("pgtask: requeued jobs of this worker whose session ended and that no runner held", "jobs", rescued)
	return nil
}
