package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-chaos/internal/chaosdb"
)

// producerCount is how many goroutines enqueue; each owns a share of the
// groups, so every group is enqueued by one goroutine, in order.
const producerCount = 4

// production is what the producers share.
type production struct {
	pool  *pgxpool.Pool
	total int           // jobs to commit
	over  time.Duration // pace
	begin time.Time

	committed atomic.Int64 // jobs committed
	handedOut atomic.Int64 // ids returned by Enqueue/EnqueueMany, committed or not
	anomalies chan string  // a commit that took only part of its jobs
}

// producer enqueues one share of the jobs. Each transaction enqueues its
// jobs and records them in pgtask_chaos.enqueued, so a job exists if and
// only if its record does; that settles a commit whose outcome was lost
// with the connection. Some transactions roll back, wholly or to a
// savepoint; their ids are recorded afterwards as not committed.
type producer struct {
	*production
	rng    *rand.Rand
	items  []item
	groups []string
	// With marks, the producer enqueues its items one at a time, the k-th
	// once share() (the finished share of the run's jobs) reaches marks[k],
	// and rolls nothing back: it enqueues the long jobs.
	marks []float64
	share func() float64
	// limited: the producer enqueues the limited jobs, its ghosts are
	// limited too, and it keeps to a pace of its own, so that its jobs
	// spread over the whole run (they are far fewer than the others).
	limited bool
	own     struct{ total, committed int }

	pending []notCommitted // not yet recorded
}

type notCommitted struct {
	ids    []int64
	groups []string
	reason string
}

func (p *producer) run(ctx context.Context) error {
	if p.marks != nil {
		return p.runMarked(ctx)
	}
	for len(p.items) > 0 {
		if err := p.pace(ctx); err != nil {
			return err
		}
		var err error
		switch r := p.rng.Float64(); {
		case r < 0.45:
			err = p.commit(ctx, p.take(1+p.rng.IntN(40)), "batch", false)
		case r < 0.80:
			err = p.commit(ctx, p.take(1+p.rng.IntN(4)), "single", false)
		case r < 0.85:
			err = p.commit(ctx, p.take(1+p.rng.IntN(20)), "batch", true)
		case r < 0.90 && !p.limited:
			err = p.commit(ctx, ungrouped(p.take(2+p.rng.IntN(30))), "workflow", false)
		default:
			err = p.rollback(ctx)
		}
		if err != nil {
			return err
		}
		p.flush(ctx, false)
	}
	p.flush(ctx, true)
	if len(p.pending) > 0 {
		return fmt.Errorf("producer: could not record %d transactions that did not commit", len(p.pending))
	}
	return ctx.Err()
}

// runMarked enqueues each item once the run has finished its mark's share
// of the jobs.
func (p *producer) runMarked(ctx context.Context) error {
	for k := 0; len(p.items) > 0; k++ {
		for ctx.Err() == nil && p.share() < p.marks[k] {
			sleep(ctx, 50*time.Millisecond)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		how := "single"
		if p.rng.IntN(2) == 0 {
			how = "batch"
		}
		if err := p.commit(ctx, p.take(1), how, false); err != nil {
			return err
		}
		p.flush(ctx, false)
	}
	p.flush(ctx, true)
	if len(p.pending) > 0 {
		return fmt.Errorf("producer: could not record %d transactions that did not commit", len(p.pending))
	}
	return ctx.Err()
}

// pace keeps the producers on schedule to finish after p.over.
func (p *producer) pace(ctx context.Context) error {
	if p.over <= 0 {
		return ctx.Err()
	}
	done := float64(p.committed.Load()) / float64(p.total)
	if p.limited {
		done = float64(p.own.committed) / float64(p.own.total)
	}
	due := p.begin.Add(time.Duration(float64(p.over) * done))
	if wait := time.Until(due); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	return ctx.Err()
}

func (p *producer) take(n int) []item {
	n = min(n, len(p.items))
	out := p.items[:n]
	p.items = p.items[n:]
	return out
}

func request(it item) (runtime.EnqueueRequest, error) {
	limited := it.limit != nil || it.rate != nil
	body, err := json.Marshal(payload{Group: it.group, Seq: it.seq, Behavior: it.behavior, Limited: limited})
	if err != nil {
		return runtime.EnqueueRequest{}, err
	}
	req := runtime.EnqueueRequest{Kind: kindOf(it.behavior, limited), Payload: body}
	req.Apply(runtime.WithQueue(queueName), runtime.WithGroup(it.group), runtime.WithMaxAttempts(maxAttemptsOf(it.behavior)))
	if it.limit != nil {
		req.Apply(runtime.WithLimit(it.limit.key, it.limit.max))
	}
	if it.rate != nil {
		req.Apply(runtime.WithRate(it.rate.key, it.rate.n, time.Second), runtime.WithRateBurst(it.rate.burst))
	}
	if it.tenant != "" {
		req.Apply(runtime.WithTenant(it.tenant))
	}
	return req, nil
}

// enqueue inserts items in tx, in one EnqueueMany or one Enqueue each. It
// returns the ids it got, also when it fails part way.
func enqueue(ctx context.Context, tx pgx.Tx, items []item, how string) ([]int64, error) {
	reqs := make([]runtime.EnqueueRequest, len(items))
	for i, it := range items {
		req, err := request(it)
		if err != nil {
			return nil, err
		}
		reqs[i] = req
	}
	var ids []int64
	if how == "workflow" {
		return enqueueWorkflow(ctx, tx, items, reqs)
	}
	if how == "batch" {
		got, err := runtime.EnqueueMany(ctx, tx, reqs)
		if err != nil {
			return nil, err
		}
		for _, id := range got {
			ids = append(ids, int64(id))
		}
		return ids, nil
	}
	for _, req := range reqs {
		id, err := runtime.Enqueue(ctx, tx, req)
		if err != nil {
			return ids, err
		}
		ids = append(ids, int64(id))
	}
	return ids, nil
}

// succeeds reports whether a job of behavior ends succeeded: only such
// jobs are a workflow step's parents, so that check 1 holds of their
// dependents too (the default policy cancels the dependents of a parent
// that fails for good).
func succeeds(behavior string) bool {
	return behavior != behaveNoRetry && behavior != behavePoison
}

// ungrouped takes items out of their groups: a workflow's steps here are
// ungrouped, so that a step waiting for its parents holds up no group (a
// parked step at a group's head stops the group until its parents
// succeed, and steps spread over many groups would chain them all).
func ungrouped(items []item) []item {
	out := make([]item, len(items))
	for i, it := range items {
		it.group = ""
		out[i] = it
	}
	return out
}

// enqueueWorkflow inserts items in tx as one workflow: each step after
// the first depends on an earlier one that succeeds, and the last also on
// all the others that succeed (a chain, forks and a fan-in), each step
// in its group as any job. Check 10 holds its steps to their parents.
func enqueueWorkflow(ctx context.Context, tx pgx.Tx, items []item, reqs []runtime.EnqueueRequest) ([]int64, error) {
	wf := runtime.NewWorkflow("chaos")
	steps := make([]runtime.Step, len(items))
	for i := range items {
		var deps []runtime.StepOption
		if i > 0 && succeeds(items[(i-1)/2].behavior) {
			deps = append(deps, runtime.After(steps[(i-1)/2]))
		}
		if i == len(items)-1 {
			for k := range i {
				if succeeds(items[k].behavior) {
					deps = append(deps, runtime.After(steps[k]))
				}
			}
		}
		steps[i] = wf.Add(reqs[i], deps...)
	}
	if _, err := wf.Enqueue(ctx, tx); err != nil {
		return nil, err
	}
	ids := make([]int64, len(items))
	for i, id := range wf.JobIDs() {
		ids[i] = int64(id)
	}
	return ids, nil
}

// ghosts are jobs enqueued only to be rolled back, into this producer's
// groups or ungrouped; the limited producer's with a limit: their enqueue
// takes slots of their key, which the rollback gives back.
func (p *producer) ghosts(n int) []item {
	out := make([]item, n)
	for i := range out {
		out[i] = item{seq: -1, behavior: behaveOK}
		if p.limited {
			out[i].limit = &limitKeys[p.rng.IntN(len(limitKeys))]
		}
		if len(p.groups) > 0 && p.rng.Float64() < 0.8 {
			out[i].group = p.groups[p.rng.IntN(len(p.groups))]
		}
	}
	return out
}

func groupsOf(items []item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.group
	}
	return out
}

// commit enqueues items in one transaction and commits it, trying again
// after a failure until the items are committed (the same items, so each
// group's order stays). With ghostsFirst the transaction first enqueues some
// ghosts in a savepoint and rolls back to it.
func (p *producer) commit(ctx context.Context, items []item, how string, ghostsFirst bool) error {
	backoff := 50 * time.Millisecond
	for {
		ids, pid, err := p.tryCommit(ctx, items, how, ghostsFirst)
		if ids != nil {
			p.handedOut.Add(int64(len(ids)))
		}
		if err == nil {
			p.committedItems(len(items))
			return nil
		}
		var unknown *commitUnknown
		if errors.As(err, &unknown) {
			committed, err := p.settle(ctx, ids, pid)
			if err != nil {
				return err
			}
			if committed {
				p.committedItems(len(items))
				return nil
			}
		}
		if len(ids) > 0 {
			p.pending = append(p.pending, notCommitted{ids: ids, groups: groupsOf(items[:len(ids)]), reason: "failed"})
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sleep(ctx, backoff)
		backoff = min(2*backoff, time.Second)
	}
}

func (p *producer) committedItems(n int) {
	p.committed.Add(int64(n))
	p.own.committed += n
}

// commitUnknown is a failed COMMIT: the transaction may have committed.
type commitUnknown struct{ err error }

func (e *commitUnknown) Error() string { return "commit: " + e.err.Error() }

// tryCommit returns the ids it was handed and the transaction's backend pid.
func (p *producer) tryCommit(ctx context.Context, items []item, how string, ghostsFirst bool) ([]int64, uint32, error) {
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	pid := tx.Conn().PgConn().PID()
	if ghostsFirst {
		ghosts := p.ghosts(1 + p.rng.IntN(5))
		sp, err := tx.Begin(ctx)
		if err != nil {
			return nil, pid, err
		}
		gids, gerr := enqueue(ctx, sp, ghosts, "batch")
		if len(gids) > 0 {
			p.handedOut.Add(int64(len(gids)))
			p.pending = append(p.pending, notCommitted{ids: gids, groups: groupsOf(ghosts), reason: "savepoint"})
		}
		if err := sp.Rollback(ctx); err != nil {
			return nil, pid, err
		}
		if gerr != nil {
			return nil, pid, gerr
		}
	}
	ids, err := enqueue(ctx, tx, items, how)
	if err != nil {
		return ids, pid, err
	}
	seqs := make([]int32, len(items))
	behaviors := make([]string, len(items))
	limitKeys := make([]string, len(items))
	limitMaxes := make([]int32, len(items))
	for i, it := range items {
		seqs[i] = int32(it.seq)
		behaviors[i] = it.behavior
		if it.limit != nil {
			limitKeys[i], limitMaxes[i] = it.limit.key, int32(it.limit.max)
		}
	}
	err = chaosdb.New(tx).RecordEnqueued(ctx, chaosdb.RecordEnqueuedParams{
		JobIds: ids, GroupKeys: groupsOf(items), Seqs: seqs, Behaviors: behaviors, How: how,
		LimitKeys: limitKeys, LimitMaxes: limitMaxes,
	})
	if err != nil {
		return ids, pid, err
	}
	if err := tx.Commit(ctx); err != nil {
		return ids, pid, &commitUnknown{err}
	}
	return ids, pid, nil
}

// settle finds out whether a transaction whose COMMIT failed committed:
// once its session is gone, its jobs' records exist if and only if it did.
func (p *producer) settle(ctx context.Context, ids []int64, pid uint32) (bool, error) {
	q := chaosdb.New(p.pool)
	since := time.Now()
	for {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		alive, err := q.BackendExists(ctx, int32(pid))
		// A live pid after a while belongs to another session by now.
		if err == nil && (!alive || time.Since(since) > 10*time.Second) {
			got, err := q.CommittedAmong(ctx, ids)
			if err == nil {
				switch len(got) {
				case len(ids):
					return true, nil
				case 0:
					return false, nil
				}
				p.anomaly(fmt.Sprintf("a transaction enqueueing jobs %v committed only %v", ids, got))
				return true, nil
			}
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

func (p *producer) anomaly(s string) {
	select {
	case p.anomalies <- s:
	default:
	}
}

// rollback enqueues ghosts in a transaction and rolls it back.
func (p *producer) rollback(ctx context.Context) error {
	ghosts := p.ghosts(1 + p.rng.IntN(10))
	how := "batch"
	if p.rng.IntN(2) == 0 {
		how = "single"
	}
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return nil // the database is away; the next step tries again
	}
	ids, _ := enqueue(ctx, tx, ghosts, how)
	tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // the connection goes away if this fails, which rolls back too
	if len(ids) > 0 {
		p.handedOut.Add(int64(len(ids)))
		p.pending = append(p.pending, notCommitted{ids: ids, groups: groupsOf(ghosts[:len(ids)]), reason: "rollback"})
	}
	return nil
}

// flush records the ids that did not commit; with wait it keeps trying
// (the database may be restarting) for up to a minute.
func (p *producer) flush(ctx context.Context, wait bool) {
	q := chaosdb.New(p.pool)
	deadline := time.Now().Add(time.Minute)
	for len(p.pending) > 0 {
		n := p.pending[0]
		// Not bounded by ctx: these records are needed by the checks even
		// when the run is cut short.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err := q.RecordNotCommitted(rctx, chaosdb.RecordNotCommittedParams{JobIds: n.ids, GroupKeys: n.groups, Reason: n.reason})
		cancel()
		if err == nil {
			p.pending = p.pending[1:]
			continue
		}
		if !wait || time.Now().After(deadline) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
