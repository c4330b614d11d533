package runtime

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"slices"
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

// bookkeeping bounds each of the runner's own statements. They are not cut
// short by shutdown: they record what the handlers did.
const bookkeeping = 30 * time.Second

// maxIdleInTransaction is the largest idle_in_transaction_session_timeout
// PostgreSQL accepts.
const maxIdleInTransaction = math.MaxInt32 * time.Millisecond

// afterCommitPatience is how long (ms) a runner, after committing, keeps
// trying to advance groups that had an enqueue in flight. Maintenance
// advances whatever is still left.
const afterCommitPatience = 500

func bookCtx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(parent), bookkeeping)
}

func (r *runner) loop(ctx, hard context.Context) {
	var delay retryDelay
	for ctx.Err() == nil {
		n, err := r.runBatch(ctx, hard)
		switch {
		case err != nil && ctx.Err() == nil:
			wait := delay.next()
			r.w.log.Warn("pgtask: claim or run failed; retrying", "queue", r.q.name, "error", err, "retry_in", wait)
			sleep(ctx, wait)
			continue
		case n > 0:
			delay.reset()
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

// runBatch claims up to BatchSize jobs and runs them; while there is work it
// goes on with the next batch, claimed inside the previous batch's
// transaction so one commit both records results and counts the next
// attempts. It returns how many jobs it ran. When it errs after claiming,
// the connection could not be trusted: it is closed, and the runner requeues
// what its session held (see requeueLost).
func (r *runner) runBatch(ctx, hard context.Context) (int, error) {
	conn, err := r.w.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("acquire connection: %w", err)
	}
	cctx, cancel := bookCtx(ctx)
	rows, err := gen.New(conn).ClaimJobs(cctx, r.claimParams())
	cancel()
	if err != nil {
		// The claim may have committed with its reply lost: hand back
		// whatever that session holds, since no rescuer will while this
		// process lives.
		lost := conn.Conn().PgConn().PID()
		discard(conn)
		r.requeueLost(hard, lost, nil, err)
		return 0, fmt.Errorf("claim jobs: %w", err)
	}
	pid := conn.Conn().PgConn().PID()
	total := 0
	for len(rows) > 0 {
		total += len(rows)
		if len(rows) >= r.q.cfg.BatchSize {
			// A full batch: there is probably more; let an idle runner help.
			r.q.signal()
		}
		next, busy, ran, err := r.runClaimed(ctx, hard, conn, rows)
		var ab *abandonment
		switch {
		case errors.As(err, &ab):
			// The abandoned handler may still use the connection: take it out
			// of the pool and close it once the handler lets go. Its session
			// has been ended already.
			pc := conn.Hijack()
			go func() {
				<-ab.done
				pc.Close(context.Background()) //nolint:errcheck // the session is gone
			}()
			return total, err
		case err != nil:
			discard(conn)
			r.requeueLost(hard, pid, ran, err)
			return total, err
		}
		if len(busy) > 0 {
			actx, cancel := bookCtx(ctx)
			still, err := gen.New(conn).AdvanceGroups(actx, gen.AdvanceGroupsParams{Queue: r.q.name, GroupKeys: busy, PatienceMs: afterCommitPatience})
			cancel()
			if err != nil || len(still) > 0 {
				r.w.log.Debug("pgtask: groups left for maintenance to advance", "queue", r.q.name, "groups", still, "error", err)
			}
		}
		rows = next
	}
	conn.Release()
	return total, nil
}

// requeueLost records, from another connection, what a batch's lost
// transaction could not: the jobs whose handlers ran are failed attempts to
// retry at once (their writes are gone), and the jobs the lost session still
// holds without having run them are handed back. A rescuer leaves these jobs
// alone while this process holds its worker lock, so this must happen here;
// it keeps trying while the database is away, until the hard shutdown.
func (r *runner) requeueLost(hard context.Context, pid uint32, ran []gen.ClaimJobsRow, cause error) {
	var delay retryDelay
	for {
		err := r.requeueLostOnce(hard, pid, ran, cause)
		if err == nil || hard.Err() != nil {
			if err != nil {
				r.w.log.Error("pgtask: could not requeue the jobs of a lost session; rescuers will once this process is gone",
					"pid", pid, "error", err)
			}
			return
		}
		wait := delay.next()
		r.w.log.Warn("pgtask: requeueing the jobs of a lost session failed; retrying", "pid", pid, "error", err, "retry_in", wait)
		sleep(hard, wait)
	}
}

func (r *runner) requeueLostOnce(hard context.Context, pid uint32, ran []gen.ClaimJobsRow, cause error) error {
	ctx, cancel := bookCtx(hard)
	defer cancel()
	conn, err := r.w.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	q := gen.New(conn)
	reason := fmt.Errorf("worker lost its database session during the attempt: %w", cause)
	var groups []string
	for _, row := range ran {
		job := &Job{ID: JobID(row.ID), Kind: row.Kind, Attempt: int(row.Attempts)}
		_, err := r.recordFailure(ctx, q, job, nil, reason, true)
		if err != nil && !errors.Is(err, errChanged) {
			return err
		}
		if row.GroupKey != "" {
			groups = append(groups, row.GroupKey)
		}
	}
	if _, err := q.ReleaseSessionJobs(ctx, gen.ReleaseSessionJobsParams{OwnerPid: int32(pid), WorkerID: r.w.id}); err != nil {
		return err
	}
	if len(groups) > 0 {
		// An attempt that was the job's last finished its group's head.
		if _, err := q.AdvanceGroups(ctx, gen.AdvanceGroupsParams{Queue: r.q.name, GroupKeys: groups, PatienceMs: afterCommitPatience}); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) claimParams() gen.ClaimJobsParams {
	return gen.ClaimJobsParams{Queue: r.q.name, Max: int32(r.q.cfg.BatchSize), WorkerID: r.w.id}
}

// discard closes a pooled connection, which ends its session and so
// releases its locks and rolls back whatever it had not committed.
func discard(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	conn.Conn().Close(ctx) //nolint:errcheck // the connection is being thrown away
	cancel()
	conn.Release()
}

// runClaimed runs claimed jobs inside one transaction on conn, records their
// outcomes, advances their groups, claims the next batch unless shutting
// down, and commits. It returns the next batch and the groups that could not
// be advanced because an enqueue into them was in flight.
//
// It also returns the jobs whose handlers it started: when it fails, their
// attempts were made but the transaction that recorded them is lost.
func (r *runner) runClaimed(ctx, hard context.Context, conn *pgxpool.Conn, rows []gen.ClaimJobsRow) (next []gen.ClaimJobsRow, busy []string, ran []gen.ClaimJobsRow, err error) {
	// In id order: a group's run (its head, then the jobs behind it) runs in
	// group order; the batch was already chosen by priority.
	slices.SortFunc(rows, func(a, b gen.ClaimJobsRow) int { return cmp.Compare(a.ID, b.ID) })
	bctx, cancel := bookCtx(ctx)
	defer cancel()
	tx, err := conn.Begin(bctx)
	if err != nil {
		return nil, nil, ran, fmt.Errorf("begin job transaction: %w", err)
	}
	abandoned := false
	defer func() {
		if !abandoned {
			tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
		}
	}()

	qtx := gen.New(tx)
	var longest time.Duration
	ids := make([]int64, len(rows))
	for i, row := range rows {
		ids[i] = row.ID
		longest = max(longest, r.timeout(row.Kind))
	}
	// The session idles in the transaction while a handler runs, never
	// longer than the handler's timeout plus the abandon grace. The server
	// takes at most 2^31-1 ms (24.8 days); 0 would mean no limit at all.
	idle := min(longest+r.w.cfg.AbandonGrace+10*time.Second, maxIdleInTransaction)
	held, err := qtx.HoldJobs(bctx, gen.HoldJobsParams{Ids: ids, IdleTimeoutMs: idle.Milliseconds()})
	if err != nil {
		return nil, nil, ran, fmt.Errorf("lock claimed jobs: %w", err)
	}
	if len(held) != len(ids) {
		// Only an operator's hand can get here; run what is still ours.
		r.w.log.Warn("pgtask: some claimed jobs changed before they could be locked", "claimed", ids, "held", held)
	}

	pid := conn.Conn().PgConn().PID()
	var done gen.CompleteJobsParams
	var groups []string
	// stopped holds the groups whose run must not go on in this batch: a job
	// failed and its group waits for the retry, or it blocks the group.
	stopped := map[string]bool{}
	var handBack []int64
	for i, row := range rows {
		if !slices.Contains(held, row.ID) {
			continue
		}
		if ctx.Err() != nil {
			// Shutting down: hand back what has not started.
			for _, left := range rows[i:] {
				handBack = append(handBack, left.ID)
			}
			break
		}
		if row.GroupKey != "" && stopped[row.GroupKey] {
			handBack = append(handBack, row.ID)
			continue
		}
		ran = append(ran, row)
		result, status, err := r.runOne(hard, tx, row)
		if err != nil {
			if errors.Is(err, errAbandoned) {
				abandoned = true
				r.afterAbandon(ctx, row, ids[i+1:], pid)
			}
			return nil, nil, ran, err
		}
		switch {
		case status == StatusSucceeded:
			done.Ids = append(done.Ids, row.ID)
			done.Attempts = append(done.Attempts, row.Attempts)
			done.Results = append(done.Results, result)
		case row.GroupKey != "" && (status != StatusFailed || row.FailBlocksGroup):
			stopped[row.GroupKey] = true
		}
		if row.GroupKey != "" {
			groups = append(groups, row.GroupKey)
		}
	}
	if len(handBack) > 0 {
		rctx, cancel := bookCtx(ctx)
		_, err := qtx.ReleaseJobs(rctx, gen.ReleaseJobsParams{Ids: handBack, OwnerPid: int32(pid)})
		cancel()
		if err != nil {
			return nil, nil, ran, fmt.Errorf("hand back unstarted jobs: %w", err)
		}
	}

	fctx, cancel := bookCtx(ctx)
	defer cancel()
	if len(done.Ids) > 0 {
		recorded, err := qtx.CompleteJobs(fctx, done)
		if err != nil {
			return nil, nil, ran, fmt.Errorf("record successes: %w", err)
		}
		if int(recorded) != len(done.Ids) {
			return nil, nil, ran, fmt.Errorf("recorded %d of %d successes: jobs %v changed under the worker", recorded, len(done.Ids), done.Ids)
		}
	}
	if len(groups) > 0 {
		// No patience here: this transaction holds its jobs' locks.
		busy, err = qtx.AdvanceGroups(fctx, gen.AdvanceGroupsParams{Queue: r.q.name, GroupKeys: groups, PatienceMs: 0})
		if err != nil {
			return nil, nil, ran, fmt.Errorf("advance groups: %w", err)
		}
	}
	if ctx.Err() == nil {
		// Claimed in this transaction, the next batch's attempts are counted
		// by the same commit that records this batch's results; that commit
		// also makes the heads this batch just promoted claimable at once.
		next, err = qtx.ClaimJobs(fctx, r.claimParams())
		if err != nil {
			return nil, nil, ran, fmt.Errorf("claim next batch: %w", err)
		}
	}
	if err := tx.Commit(fctx); err != nil {
		return nil, nil, ran, fmt.Errorf("commit job transaction: %w", err)
	}
	return next, busy, nil, nil
}

func (r *runner) timeout(kind string) time.Duration {
	if reg := r.w.handler(kind); reg != nil {
		return reg.Timeout
	}
	return r.w.cfg.DefaultTimeout
}

// runOne runs one claimed job of tx and returns the job's new status. A
// success is returned with its result for the caller to record with the
// batch's others; a failure is recorded here, its writes rolled back to the
// job's savepoint. It returns an error only when the transaction can no
// longer be used.
func (r *runner) runOne(hard context.Context, tx pgx.Tx, row gen.ClaimJobsRow) (json.RawMessage, Status, error) {
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
	job.Group = row.GroupKey // empty for an ungrouped job
	// Built only when something is logged: most jobs succeed quietly.
	log := func() *slog.Logger {
		return r.w.log.With("job_id", row.ID, "kind", row.Kind, "queue", row.Queue, "attempt", row.Attempts)
	}
	q := gen.New(tx)
	jtx := &jobTx{Tx: tx, savepoint: q.SavepointJob}
	job.tx = jtx
	start := time.Now()

	reg := r.w.handler(row.Kind)
	var outcome error
	if reg == nil {
		// Retried like any failure: a newer worker may know the kind.
		outcome = fmt.Errorf("no handler for kind %q in this worker (it handles %v)", row.Kind, r.w.kinds())
	} else {
		var done <-chan error
		outcome, done = r.call(hard, reg, job)
		if done != nil {
			log().Error("pgtask: abandoning a handler that ignores its context", "error", outcome)
			return nil, "", &abandonment{job: job.ID, outcome: outcome, done: done}
		}
	}

	ctx, cancel := bookCtx(hard)
	defer cancel()
	if outcome == nil {
		if !jtx.taken {
			return job.result, StatusSucceeded, nil
		}
		err := q.ReleaseJobSavepoint(ctx)
		if err == nil {
			return job.result, StatusSucceeded, nil
		}
		// Typically a statement the handler ran failed and it ignored the
		// error: the transaction is aborted.
		outcome = fmt.Errorf("the handler returned success but its transaction failed: %w", err)
	}
	if jtx.taken {
		if err := q.RollbackJobSavepoint(ctx); err != nil {
			return nil, "", fmt.Errorf("job %d: roll back savepoint after %v: %w", row.ID, outcome, err)
		}
	}
	status, err := r.recordFailure(ctx, q, job, reg, outcome, hard.Err() != nil)
	if err != nil {
		return nil, "", err
	}
	if Status(status) == StatusFailed {
		// Nothing will retry it: someone has to look.
		log().Error("pgtask: job failed for good", "error", outcome, "took", time.Since(start))
	} else {
		log().Warn("pgtask: job attempt failed; it will be retried", "error", outcome, "now", status, "took", time.Since(start))
	}
	return nil, Status(status), nil
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
		var b Backoff // zero: the default policy
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
		return "", fmt.Errorf("job %d: %w", job.ID, errChanged)
	}
	return status, nil
}

// errChanged means a job was no longer the started attempt this worker ran:
// it was rescued, or its result had been recorded after all.
var errChanged = errors.New("not in the state this worker claimed it in")

// call runs the handler with its timeout, recovering a panic. It gives up on
// a handler that ignores its context for AbandonGrace past the timeout and
// then returns the channel the handler's result will arrive on, if ever.
func (r *runner) call(hard context.Context, reg *Registration, job *Job) (error, <-chan error) {
	ctx, cancel := context.WithTimeout(hard, reg.Timeout)
	defer cancel() // an abandoned handler's context is past its deadline already
	done := make(chan error, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- &PanicError{Value: v, Stack: debug.Stack()}
			}
		}()
		done <- reg.Handler(ctx, job)
	}()
	timedOut := func() bool { return errors.Is(ctx.Err(), context.DeadlineExceeded) && hard.Err() == nil }
	select {
	case err := <-done:
		if timedOut() {
			// Finished after its deadline: its writes may be cut short, so
			// the attempt fails whatever it returned.
			return fmt.Errorf("timed out after %s: %w", reg.Timeout, nonNil(err, ctx.Err())), nil
		}
		return err, nil
	case <-ctx.Done():
	}
	grace := time.NewTimer(r.w.cfg.AbandonGrace)
	defer grace.Stop()
	select {
	case err := <-done:
		if !timedOut() {
			return fmt.Errorf("worker shut down during the attempt: %w", nonNil(err, ctx.Err())), nil
		}
		return fmt.Errorf("timed out after %s: %w", reg.Timeout, nonNil(err, ctx.Err())), nil
	case <-grace.C:
		return abandonedError(reg.Timeout, r.w.cfg.AbandonGrace), done
	}
}

func abandonedError(timeout, grace time.Duration) error {
	return fmt.Errorf("timed out after %s and ignored cancellation for %s; abandoned", timeout, grace)
}

// errAbandoned marks the error of a batch whose handler was abandoned.
var errAbandoned = errors.New("handler abandoned")

// abandonment is a handler the runner gave up on; done delivers its result
// if it ever returns.
type abandonment struct {
	job     JobID
	outcome error
	done    <-chan error
}

func (a *abandonment) Error() string {
	return fmt.Sprintf("job %d: %v: %v", a.job, errAbandoned, a.outcome)
}

func (a *abandonment) Unwrap() error { return errAbandoned }

// afterAbandon cleans up after an abandoned handler, whose goroutine may still
// use the job's transaction: from another connection it ends that session,
// which rolls the handler's writes back and releases the locks; records the
// failed attempt; moves the job's group on if that was its last attempt; and
// hands back the batch's jobs that never started. Whatever fails here, the
// rescuer and maintenance redo once the session is gone.
func (r *runner) afterAbandon(ctx context.Context, row gen.ClaimJobsRow, rest []int64, pid uint32) {
	bctx, cancel := bookCtx(ctx)
	defer cancel()
	q := gen.New(r.w.pool)
	log := r.w.log.With("job_id", row.ID, "kind", row.Kind, "queue", row.Queue)
	terminated, err := q.TerminateBackend(bctx, int32(pid))
	if err != nil || !terminated {
		log.Error("pgtask: could not end the abandoned handler's session; its jobs wait for idle_in_transaction_session_timeout",
			"pid", pid, "error", err)
		return
	}
	job := &Job{ID: JobID(row.ID), Kind: row.Kind, Attempt: int(row.Attempts)}
	reason := abandonedError(r.timeout(row.Kind), r.w.cfg.AbandonGrace)
	if _, err := r.recordFailure(bctx, q, job, r.w.handler(row.Kind), reason, false); err != nil {
		log.Error("pgtask: could not record the abandoned attempt; the rescuer will", "error", err)
	}
	if row.GroupKey != "" {
		if _, err := q.AdvanceGroups(bctx, gen.AdvanceGroupsParams{Queue: row.Queue, GroupKeys: []string{row.GroupKey}, PatienceMs: afterCommitPatience}); err != nil {
			log.Error("pgtask: could not advance the abandoned job's group; maintenance will", "error", err)
		}
	}
	if len(rest) > 0 {
		if _, err := q.ReleaseJobs(bctx, gen.ReleaseJobsParams{Ids: rest, OwnerPid: int32(pid)}); err != nil {
			log.Error("pgtask: could not hand back the rest of an abandoned batch; the rescuer will", "jobs", rest, "error", err)
		}
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
