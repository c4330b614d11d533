package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/gen"
)

// rescuer, every maintenance round, requeues jobs whose worker's session
// ended mid-attempt, takes over leased jobs whose lease ran out, and moves
// on groups whose finished head was left in place (an enqueue was in
// flight, or the worker died). Every worker does this; SKIP LOCKED keeps
// them from getting in each other's way. Its ownRescue, a service of its
// own that runs after cancel requests, rescues this worker's own held-mode
// jobs that no runner holds any more (see rescueOwn).
type rescuer struct {
	pool     *pgxpool.Pool
	q        *gen.Queries
	log      *slog.Logger
	batch    int32
	workerID int32
	// claims are the worker's held-mode claims a runner may still run.
	claims *claimTokens
}

func (r *rescuer) step(ctx context.Context) error {
	rescued, err := r.q.RescueOrphans(ctx, gen.RescueOrphansParams{Max: r.batch, WorkerID: r.workerID})
	if err != nil {
		return err
	}
	if len(rescued) > 0 {
		r.log.Warn("pgtask: requeued jobs whose worker died mid-attempt", "jobs", rescued)
	}
	expired, err := r.q.ExpireLeases(ctx, gen.ExpireLeasesParams{Max: r.batch, WorkerID: r.workerID})
	if err != nil {
		return err
	}
	if len(expired) > 0 {
		r.log.Warn("pgtask: took over jobs whose lease ran out while their worker lived", "jobs", expired)
	}
	_, err = r.q.AdvanceFinishedGroups(ctx, r.batch)
	return err
}

// ownRescue is the rescuer's rescueOwn as a service of the round.
type ownRescue struct{ r *rescuer }

func (o ownRescue) step(ctx context.Context) error { return o.r.rescueOwn(ctx) }

// rescueOwn rescues this worker's own held-mode jobs whose session is gone
// and that none of its runners holds any more: a claim that committed on
// the server after its runner gave up waiting for the reply (and so after
// the runner handed back what its session held), or a lost batch the
// runner could not record. Other workers leave them alone while this one
// lives, and nothing else would ever move them, or their groups, on.
//
// The rows are locked first and the tokens checked after: a runner marks a
// claim's token as held before it sends the claim, and forgets it only when
// it is done with every job the claim took, so a job whose token is not held
// once its row is locked has no handler of this worker running it.
func (r *rescuer) rescueOwn(ctx context.Context) error {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	q := gen.New(tx)
	found, err := q.OwnOrphans(ctx, gen.OwnOrphansParams{WorkerID: r.workerID, Max: r.batch})
	if err != nil || len(found) == 0 {
		return err
	}
	var ids []int64
	for _, o := range found {
		if !r.claims.holds(o.Token) {
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
	r.log.Warn("pgtask: requeued jobs of this worker whose session ended and that no runner held", "jobs", rescued)
	return nil
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
