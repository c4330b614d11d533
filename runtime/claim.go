package runtime

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/gen"
)

// A runner is one slot of a queue's concurrency. It claims a batch of jobs on
// one connection, runs them in one transaction that holds their row locks,
// commits, and claims again; when the queue is empty it waits for a
// notification or the poll interval.
type runner struct {
	w *Worker
	q *queue
}

// bookkeeping bounds the runner's own statements, which must not be cut short
// by shutdown: they record what the handlers did.
const bookkeeping = 30 * time.Second

func (r *runner) loop(ctx, hard context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		n, err := r.runBatch(ctx, hard)
		switch {
		case err != nil && ctx.Err() == nil:
			r.w.log.Warn("pgtask: claim or run failed; retrying", "queue", r.q.name, "error", err, "retry_in", backoff)
			sleep(ctx, backoff)
			backoff = min(backoff*2, 5*time.Second)
			continue
		case n >= r.q.cfg.BatchSize:
			// A full batch: there is probably more; let an idle runner help.
			r.q.signal()
			backoff = 100 * time.Millisecond
			continue
		case n > 0:
			backoff = 100 * time.Millisecond
			continue
		}
		poll := time.NewTimer(jitter(r.w.cfg.PollInterval))
		select {
		case <-ctx.Done():
		case <-r.q.wake:
		case <-poll.C:
		}
		poll.Stop()
	}
}

// runBatch claims up to BatchSize jobs and runs them. It returns how many it
// claimed. An error means the connection could not be trusted any more and
// was closed; jobs it held are then requeued by the rescuer, their attempt
// counted.
func (r *runner) runBatch(ctx, hard context.Context) (int, error) {
	book := context.WithoutCancel(ctx)
	conn, err := r.w.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("acquire connection: %w", err)
	}
	broken, hijacked := true, false
	defer func() {
		if hijacked {
			return
		}
		if broken {
			// Closing the session releases its locks and makes the rescuer see
			// the jobs' owner gone.
			closeCtx, cancel := context.WithTimeout(book, time.Second)
			conn.Conn().Close(closeCtx) //nolint:errcheck // the connection is being discarded
			cancel()
		}
		conn.Release()
	}()

	q := gen.New(conn)
	claimCtx, cancel := context.WithTimeout(book, bookkeeping)
	rows, err := q.ClaimJobs(claimCtx, gen.ClaimJobsParams{Queue: r.q.name, Max: int32(r.q.cfg.BatchSize)})
	cancel()
	if err != nil {
		return 0, fmt.Errorf("claim jobs: %w", err)
	}
	if len(rows) == 0 {
		broken = false
		return 0, nil
	}
	slices.SortFunc(rows, func(a, b gen.ClaimJobsRow) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.ID, b.ID))
	})
	if err := r.runClaimed(ctx, hard, conn, rows); err != nil {
		if errors.Is(err, errAbandoned) {
			// The abandoned handler may still be using the connection: take
			// it out of the pool and leave it alone. Its session is ended.
			hijacked = true
			conn.Hijack()
			return len(rows), err
		}
		return len(rows), err
	}
	broken = false
	return len(rows), nil
}

// runClaimed runs claimed jobs inside one transaction on conn.
func (r *runner) runClaimed(ctx, hard context.Context, conn *pgxpool.Conn, rows []gen.ClaimJobsRow) error {
	book := context.WithoutCancel(ctx)
	bctx, cancel := context.WithTimeout(book, bookkeeping)
	defer cancel()
	tx, err := conn.Begin(bctx)
	if err != nil {
		return fmt.Errorf("begin job transaction: %w", err)
	}
	abandoned := false
	defer func() {
		if !abandoned {
			tx.Rollback(book) //nolint:errcheck // a no-op after Commit
		}
	}()

	qtx := gen.New(tx)
	var longest time.Duration
	ids := make([]int64, len(rows))
	for i, row := range rows {
		ids[i] = row.ID
		longest = max(longest, r.timeout(row.Kind))
	}
	idle := longest + r.w.cfg.AbandonGrace + 10*time.Second
	if err := qtx.SetIdleTimeout(bctx, strconv.FormatInt(idle.Milliseconds(), 10)); err != nil {
		return fmt.Errorf("set idle timeout: %w", err)
	}
	held, err := qtx.HoldJobs(bctx, ids)
	if err != nil {
		return fmt.Errorf("lock claimed jobs: %w", err)
	}
	if len(held) != len(ids) {
		// Only an operator's hand can get here; run what is still ours.
		r.w.log.Warn("pgtask: some claimed jobs changed before they could be locked", "claimed", ids, "held", held)
	}
	pid := conn.Conn().PgConn().PID()
	var groups []string
	for i, row := range rows {
		if !slices.Contains(held, row.ID) {
			continue
		}
		if ctx.Err() != nil {
			// Shutting down: hand back what has not started.
			rest := make([]int64, 0, len(rows)-i)
			for _, left := range rows[i:] {
				rest = append(rest, left.ID)
			}
			if _, err := qtx.ReleaseJobs(bctx, gen.ReleaseJobsParams{Ids: rest, OwnerPid: int32(pid)}); err != nil {
				return fmt.Errorf("release unstarted jobs: %w", err)
			}
			break
		}
		if err := r.runOne(hard, tx, row, pid); err != nil {
			if errors.Is(err, errAbandoned) {
				abandoned = true
				r.releaseAfterAbandon(book, rows[i+1:], pid)
			}
			return err
		}
		if row.GroupKey != nil {
			groups = append(groups, *row.GroupKey)
		}
	}
	if len(groups) > 0 {
		// Once per batch and in key order, like enqueueing: see advance_groups.
		if err := qtx.AdvanceGroups(bctx, gen.AdvanceGroupsParams{Queue: r.q.name, GroupKeys: groups}); err != nil {
			return fmt.Errorf("advance groups: %w", err)
		}
	}
	if err := tx.Commit(bctx); err != nil {
		return fmt.Errorf("commit job transaction: %w", err)
	}
	return nil
}

func (r *runner) timeout(kind string) time.Duration {
	if reg := r.w.handler(kind); reg != nil {
		return reg.Timeout
	}
	return r.w.cfg.DefaultTimeout
}

// runOne runs one claimed job in a savepoint of tx and records its outcome in
// tx. It returns an error only when the transaction can no longer be used.
func (r *runner) runOne(hard context.Context, tx pgx.Tx, row gen.ClaimJobsRow, pid uint32) error {
	book := context.WithoutCancel(hard)
	job := &Job{
		ID:          JobID(row.ID),
		Kind:        row.Kind,
		Queue:       row.Queue,
		Priority:    row.Priority,
		Attempt:     int(row.Attempts),
		MaxAttempts: int(row.MaxAttempts),
		Payload:     row.Payload,
		CreatedAt:   row.CreatedAt,
	}
	if row.GroupKey != nil {
		job.Group = *row.GroupKey
	}
	log := r.w.log.With("job_id", row.ID, "kind", row.Kind, "queue", row.Queue, "attempt", row.Attempts)

	reg := r.w.handler(row.Kind)
	q := gen.New(tx)
	if err := q.SavepointJob(book); err != nil {
		return fmt.Errorf("job %d: savepoint: %w", row.ID, err)
	}
	job.tx = jobTx{tx}
	start := time.Now()

	var outcome error
	if reg == nil {
		// Retried like any failure: a newer worker may know the kind.
		outcome = fmt.Errorf("no handler for kind %q in this worker (it handles %v)", row.Kind, r.w.kinds())
	} else {
		var abandoned bool
		outcome, abandoned = r.call(hard, reg, job)
		if abandoned {
			return r.abandon(book, job, pid, outcome, log)
		}
	}
	if outcome == nil {
		if err := q.ReleaseJobSavepoint(book); err != nil {
			// Typically a statement the handler ran failed and it ignored
			// the error: the transaction is aborted.
			outcome = fmt.Errorf("the handler returned success but its transaction failed: %w", err)
		}
	}

	if outcome == nil {
		recorded, err := q.CompleteJob(book, gen.CompleteJobParams{ID: row.ID, Attempt: row.Attempts, Result: job.result})
		if err != nil {
			return fmt.Errorf("job %d: record success: %w", row.ID, err)
		}
		if !recorded {
			return fmt.Errorf("job %d: not in the state this worker claimed it in", row.ID)
		}
		log.Debug("pgtask: job succeeded", "took", time.Since(start))
		return nil
	}

	if err := q.RollbackJobSavepoint(book); err != nil {
		return fmt.Errorf("job %d: roll back savepoint after %v: %w", row.ID, outcome, err)
	}
	status, err := r.recordFailure(book, q, job, reg, outcome, hard.Err() != nil)
	if err != nil {
		return err
	}
	log.Warn("pgtask: job attempt failed", "error", outcome, "now", status, "took", time.Since(start))
	return nil
}

// recordFailure stores a failed attempt with its retry delay, or as final.
func (r *runner) recordFailure(ctx context.Context, q *gen.Queries, job *Job, reg *Registration, outcome error, shutdown bool) (string, error) {
	entry := map[string]any{"attempt": job.Attempt, "error": truncate(outcome.Error(), 4096)}
	var pe *PanicError
	if errors.As(outcome, &pe) {
		entry["panic"] = true
		entry["stack"] = truncate(string(pe.Stack), 8192)
	}
	errJSON, err := json.Marshal(entry)
	if err != nil {
		return "", fmt.Errorf("job %d: encode error: %w", job.ID, err)
	}
	params := gen.FailJobParams{ID: int64(job.ID), Attempt: int32(job.Attempt), Error: errJSON}
	var ra *retryAfterError
	switch {
	case IsNoRetry(outcome):
		// final: retry_in_us stays NULL
	case shutdown:
		params.RetryInUs.Valid = true // cut short by shutdown: retry at once
	case errors.As(outcome, &ra):
		params.RetryInUs.Int64, params.RetryInUs.Valid = ra.delay.Microseconds(), true
	default:
		b := DefaultBackoff
		if reg != nil {
			b = reg.Backoff
		}
		params.RetryInUs.Int64, params.RetryInUs.Valid = b.Delay(job.Attempt).Microseconds(), true
	}
	status, err := q.FailJob(ctx, params)
	if err != nil {
		return "", fmt.Errorf("job %d: record failure: %w", job.ID, err)
	}
	if status == "" {
		return "", fmt.Errorf("job %d: not in the state this worker claimed it in", job.ID)
	}
	return status, nil
}

// call runs the handler with its timeout, recovering a panic. It gives up on
// a handler that ignores its context for AbandonGrace past the timeout.
func (r *runner) call(hard context.Context, reg *Registration, job *Job) (err error, abandoned bool) {
	ctx, cancel := context.WithTimeout(hard, reg.Timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- &PanicError{Value: v, Stack: debug.Stack()}
			}
		}()
		done <- reg.Handler(ctx, job)
	}()
	select {
	case err := <-done:
		if err == nil && ctx.Err() != nil && hard.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// Finished after its deadline: its writes may be cut, so it fails.
			return fmt.Errorf("timed out after %s", reg.Timeout), false
		}
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && hard.Err() == nil {
			return fmt.Errorf("timed out after %s: %w", reg.Timeout, err), false
		}
		return err, false
	case <-ctx.Done():
	}
	grace := time.NewTimer(r.w.cfg.AbandonGrace)
	defer grace.Stop()
	select {
	case err := <-done:
		if hard.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("worker shut down during the attempt: %w", nonNil(err, ctx.Err())), false
		}
		return fmt.Errorf("timed out after %s: %w", reg.Timeout, nonNil(err, ctx.Err())), false
	case <-grace.C:
		return fmt.Errorf("timed out after %s and ignored cancellation for %s; abandoned", reg.Timeout, r.w.cfg.AbandonGrace), true
	}
}

// abandon handles a handler that will not return: its goroutine may still use
// the transaction, so the runner ends the session from another connection,
// which releases the job's locks and rolls its writes back, and records the
// failure there. The caller then discards the connection.
func (r *runner) abandon(ctx context.Context, job *Job, pid uint32, outcome error, log interface{ Error(string, ...any) }) error {
	log.Error("pgtask: abandoning a handler that ignores its context", "error", outcome)
	q := gen.New(r.w.pool)
	if _, err := q.TerminateBackend(ctx, int32(pid)); err != nil {
		return fmt.Errorf("job %d: end abandoned session: %w", job.ID, err)
	}
	reg := r.w.handler(job.Kind)
	if _, err := r.recordFailure(ctx, q, job, reg, outcome, false); err != nil {
		// The rescuer will requeue it: the session is gone.
		log.Error("pgtask: could not record the abandoned attempt", "error", err)
	}
	return fmt.Errorf("job %d: %w: %w", job.ID, errAbandoned, outcome)
}

var errAbandoned = errors.New("handler abandoned")

// releaseAfterAbandon hands back the jobs of a batch that never started,
// from another connection, once the abandoned session is gone.
func (r *runner) releaseAfterAbandon(ctx context.Context, rows []gen.ClaimJobsRow, pid uint32) {
	if len(rows) == 0 {
		return
	}
	ids := make([]int64, len(rows))
	for i, row := range rows {
		ids[i] = row.ID
	}
	ctx, cancel := context.WithTimeout(ctx, bookkeeping)
	defer cancel()
	if _, err := gen.New(r.w.pool).ReleaseJobs(ctx, gen.ReleaseJobsParams{Ids: ids, OwnerPid: int32(pid)}); err != nil {
		r.w.log.Error("pgtask: could not hand back the rest of an abandoned batch; the rescuer will requeue it", "jobs", ids, "error", err)
	}
}

func nonNil(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…(truncated)"
}

// jitter spreads d by ±10% so idle runners do not poll in step.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.2-0.1)*float64(d))
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
