package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgtask/pgtask/gen"
)

// outcome is how one attempt ended: a success with its result, or a failure.
type outcome struct {
	row   gen.ClaimJobsRow
	reg   *Registration // nil when the worker has no handler for the kind
	start time.Time
	// err is nil for a success.
	err    error
	result json.RawMessage
	// retryNow retries a failure at once, whatever its backoff: the attempt
	// was cut short by the worker's hard shutdown, or rolled back with its
	// batch or its lost session, not failed by the handler.
	retryNow bool
	// claimToken is the token of the claim that took the job (0: not
	// known). A snooze gives the attempt back, so its number comes round
	// again: the token fences the snooze's record (see pgtask.fail_job),
	// lest one sent again after its reply was lost apply to the job's next
	// claim.
	claimToken int64
}

// refusedBy turns the outcome into the failure the server's refusal to
// record it (err) makes it: its result is not kept (nor are its writes,
// which the modes see to), and it is retried or not as any failure.
func (o outcome) refusedBy(err error) outcome {
	if o.err == nil {
		o.err = fmt.Errorf("the database refused to record the attempt's outcome: %w", err)
	} else {
		o.err = fmt.Errorf("the database refused to record the attempt's outcome (%v): %w", o.err, err)
	}
	o.result = nil
	o.retryNow = false
	return o
}

// stopsGroup reports whether a grouped job's attempt keeps its group from
// moving on (it will be retried, or it blocks the group): the jobs behind
// it in the same run must not start.
func (o outcome) stopsGroup() bool {
	return o.row.GroupKey != "" && o.err != nil && (o.retries() || o.row.FailBlocksGroup)
}

// retries reports whether a failed attempt will be retried. A snooze is,
// unless it takes its job past its cap on snoozes, which fails it.
func (o outcome) retries() bool {
	if o.snooze() != nil {
		return !o.snoozesPastCap()
	}
	return o.err != nil && !IsNoRetry(o.err) && o.row.Attempts < o.row.MaxAttempts
}

// snooze is the snooze the handler asked for (see Snooze), or nil: for
// NoRetry, which is final, none.
func (o outcome) snooze() *SnoozeError {
	if o.err == nil || IsNoRetry(o.err) {
		return nil
	}
	return snoozeOf(o.err)
}

// retryInUs is the backoff before the next attempt in microseconds, or -1
// for none (see pgtask.settle_jobs).
func (o outcome) retryInUs() int64 {
	var ra *retryAfterError
	switch {
	case IsNoRetry(o.err):
		return -1
	case o.snooze() != nil:
		return o.snooze().Delay.Microseconds()
	case o.retryNow:
		return 0
	case errors.As(o.err, &ra):
		return ra.delay.Microseconds()
	}
	var b Backoff // zero: the default policy
	if o.reg != nil {
		b = o.reg.Backoff
	}
	return b.Delay(int(o.row.Attempts)).Microseconds()
}

// errorEntry is the failure as stored in the job's error history. Its text
// is cleaned of what jsonb cannot store and capped, so recording it cannot
// fail on its content. A snooze's entry is stored only when it ends the job
// (cancelled; past its cap pgtask.fail_job writes its own).
func (o outcome) errorEntry() json.RawMessage {
	entry := map[string]any{"attempt": o.row.Attempts, "error": storable(o.err.Error(), 4096)}
	var pe *PanicError
	if errors.As(o.err, &pe) {
		entry["panic"] = true
		entry["stack"] = storable(string(pe.Stack), 8192)
	}
	b, err := json.Marshal(entry)
	if err != nil {
		// Strings and numbers always encode.
		panic(fmt.Sprintf("pgtask: encode error entry: %v", err))
	}
	return b
}

// snoozeCap is how often the outcome's job may snooze.
func (o outcome) snoozeCap() int {
	n := DefaultMaxSnoozes
	if o.reg != nil && o.reg.MaxSnoozes > 0 {
		n = o.reg.MaxSnoozes
	}
	return min(n, math.MaxInt32)
}

// snoozesPastCap reports whether the outcome is a snooze that takes its
// job's snooze count past its kind's cap, which fails the job for good
// (see pgtask.fail_job): the count came with the claim.
func (o outcome) snoozesPastCap() bool {
	return o.snooze() != nil && int(o.row.Snoozes) >= o.snoozeCap()
}

func (o outcome) log(w *Worker) {
	if o.err == nil {
		return
	}
	args := []any{"job_id", o.row.ID, "kind", o.row.Kind, "queue", o.row.Queue, "attempt", o.row.Attempts,
		"error", o.err, "took", time.Since(o.start)}
	switch {
	case errors.Is(o.err, ErrJobCancelled):
		w.log.Info("pgtask: job cancelled", args...)
	case o.snoozesPastCap():
		w.log.Error("pgtask: job snoozed past its cap on snoozes; it failed", append(args, "snoozes", o.row.Snoozes+1, "max_snoozes", o.snoozeCap())...)
	case o.snooze() != nil:
		w.log.Debug("pgtask: job snoozed", "job_id", o.row.ID, "kind", o.row.Kind, "queue", o.row.Queue,
			"delay", o.snooze().Delay, "took", time.Since(o.start))
	case o.retries():
		w.log.Warn("pgtask: job attempt failed; it will be retried", args...)
	default:
		// Nothing will retry it: someone has to look.
		w.log.Error("pgtask: job failed for good", args...)
	}
}

// announceFailure stands as the result of a failed attempt of a kind with
// results: pgtask.settle_jobs announces the finishes of jobs whose result
// is not NULL, and stores no result for a failure.
var announceFailure = json.RawMessage("null")

// settlement is the arguments of SettleJobs for outcomes.
func settlement(queue string, outs []outcome, claiming bool) gen.SettleJobsParams {
	p := gen.SettleJobsParams{Queue: queue, Claiming: claiming}
	for _, o := range outs {
		p.Ids = append(p.Ids, o.row.ID)
		p.Attempts = append(p.Attempts, o.row.Attempts)
		if o.err == nil {
			p.Results = append(p.Results, o.result)
			p.Errors = append(p.Errors, nil)
			p.RetryInUs = append(p.RetryInUs, -1)
			p.SnoozeCaps = append(p.SnoozeCaps, 0)
			p.Tokens = append(p.Tokens, 0)
			continue
		}
		if o.reg != nil && o.reg.HasResult {
			// No result, but announce the finish (see pgtask.settle_jobs).
			p.Results = append(p.Results, announceFailure)
		} else {
			p.Results = append(p.Results, nil)
		}
		p.Errors = append(p.Errors, o.errorEntry())
		p.RetryInUs = append(p.RetryInUs, o.retryInUs())
		if o.snooze() != nil {
			p.SnoozeCaps = append(p.SnoozeCaps, int32(o.snoozeCap()))
			p.Tokens = append(p.Tokens, o.claimToken)
		} else {
			p.SnoozeCaps = append(p.SnoozeCaps, 0)
			p.Tokens = append(p.Tokens, 0)
		}
	}
	return p
}

// queueSettle adds to b the statement that records outs (SettleJobs), its
// result to go to res. The caller hands outs and res to recorded once the
// statement's transaction has committed. It is the one way outcomes reach
// pgtask.settle_jobs, in both modes: in a batch with the statements around
// them, or alone (settleNow).
func queueSettle(b *pgx.Batch, queue string, outs []outcome, claiming bool, res *gen.SettleJobsRow) gen.SettleJobsParams {
	p := settlement(queue, outs, claiming)
	b.Queue(gen.SettleJobs, p.Queue, p.Ids, p.Attempts, p.Results, p.Errors, p.RetryInUs, p.SnoozeCaps, p.Tokens, p.Claiming).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&res.Recorded, &res.Busy); err != nil {
			return &recordError{err}
		}
		return nil
	})
	return p
}

// recorded follows every committed record of outcomes, in both modes (a
// held batch's commit, a lost held session's record from another
// connection, a lease turn, a lease job's own transaction): outs were
// recorded by the statement whose reply is res. It logs the failures, as
// the jobs' rows show them when the statement refused some (fenced off: the
// attempt was no longer the job's, or a record sent again after its reply
// was lost went through the first time), and hands the groups an enqueue
// kept from moving on to the worker, which retries them on another
// connection: before the commit, the groups' heads were not seen as
// finished by anyone else.
func (w *Worker) recorded(ctx context.Context, queue string, outs []outcome, res gen.SettleJobsRow) {
	if int(res.Recorded) < len(outs) {
		bctx, cancel := bookCtx(ctx)
		w.logAsRecorded(bctx, outs)
		cancel()
	} else {
		for _, o := range outs {
			o.log(w)
		}
	}
	if len(res.Busy) > 0 {
		w.advanceLater(queue, res.Busy)
	}
}

// advanceLater has the worker try again, on a connection of its own, to
// move on groups an enqueue kept from moving on at a job's commit. When it
// is busy, maintenance does it a little later.
func (w *Worker) advanceLater(queue string, keys []string) {
	select {
	case w.later <- groupsOf{queue, keys}:
	default:
	}
}

// batchSender is a connection or transaction that sends batches.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// settleNow records outs on db at once (see queueSettle), as a statement of
// its own: its error is the statement's, for the caller to say what failed.
func settleNow(ctx context.Context, db batchSender, queue string, outs []outcome) (gen.SettleJobsRow, error) {
	var res gen.SettleJobsRow
	b := &pgx.Batch{}
	queueSettle(b, queue, outs, false, &res)
	err := db.SendBatch(ctx, b).Close()
	if re := (*recordError)(nil); errors.As(err, &re) {
		err = re.err
	}
	return res, err
}

// recordError is the statement that records outcomes failing.
type recordError struct{ err error }

func (e *recordError) Error() string { return "record outcomes: " + e.err.Error() }
func (e *recordError) Unwrap() error { return e.err }

// recordRefused reports whether err is the server refusing the statement
// that records outcomes: one of them may be what it cannot store, and
// would be refused again with the others.
func recordRefused(err error) bool {
	var re *recordError
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "25P02" {
		// The transaction had failed before: the records are not the cause.
		return false
	}
	return errors.As(err, &re) && refusal(re.err)
}

// serverRefusal is what the server said in err, without what wraps it.
func serverRefusal(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr
	}
	return err
}

// recordedIn reports whether job shows the outcome recorded.
func (o outcome) recordedIn(job gen.PgtaskJob) bool {
	if o.snooze() != nil {
		// Its attempt given back, and nothing in the history; or, past its
		// cap, failed with an entry saying so.
		e := o.attemptError(job)
		return job.Attempts == o.row.Attempts-1 &&
			(job.Status == gen.PgtaskJobStatusQueued || job.Status == gen.PgtaskJobStatusScheduled) ||
			job.Attempts == o.row.Attempts && job.Status == gen.PgtaskJobStatusFailed && e != nil && strings.HasPrefix(e.Error, "snoozed ")
	}
	if job.Attempts != o.row.Attempts {
		return false
	}
	if o.err == nil {
		return job.Status == gen.PgtaskJobStatusSucceeded
	}
	e := o.attemptError(job)
	return e != nil && e.Error == storable(o.err.Error(), 4096)
}

// storedError is an entry of a job's error history.
type storedError struct {
	Attempt int32  `json:"attempt"`
	Error   string `json:"error"`
}

// attemptError is the newest entry of job's error history for the
// outcome's attempt, or nil.
func (o outcome) attemptError(job gen.PgtaskJob) *storedError {
	var errs []storedError
	if json.Unmarshal(job.Errors, &errs) != nil {
		return nil
	}
	for i := len(errs) - 1; i >= 0; i-- {
		if errs[i].Attempt == o.row.Attempts {
			return &errs[i]
		}
	}
	return nil
}

// logAsRecorded logs each of outs as the database shows it, after the
// statement that recorded them refused some (fenced: the attempt was no
// longer the job's), or when what happened to it is not known (a reply
// lost with the session): the job's row says what happened.
func (w *Worker) logAsRecorded(ctx context.Context, outs []outcome) {
	q := gen.New(w.pool)
	for _, o := range outs {
		args := []any{"job_id", o.row.ID, "kind", o.row.Kind, "queue", o.row.Queue, "attempt", o.row.Attempts}
		job, err := q.GetJob(ctx, o.row.ID)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			w.log.Warn("pgtask: job attempt's outcome refused: the job was deleted", args...)
		case err != nil:
			w.log.Warn("pgtask: could not read back a job whose attempt's outcome may have been refused",
				append(args, "outcome_error", o.err, "error", err)...)
		case o.recordedIn(job):
			o.log(w)
		case o.err != nil && job.Attempts == o.row.Attempts && job.Status == gen.PgtaskJobStatusSucceeded:
			// The attempt's success committed, though the worker did not
			// hear so (its session was lost with the reply).
			w.log.Info("pgtask: job succeeded; its commit went through before the worker lost its reply", args...)
		case job.Attempts > o.row.Attempts || o.attemptError(job) != nil:
			// Another worker recorded this attempt's end, or began another.
			w.log.Warn("pgtask: job attempt's outcome refused: the job was taken over",
				append(args, "job_attempts", job.Attempts, "job_status", job.Status, "outcome_error", o.err)...)
		default:
			w.log.Warn("pgtask: job attempt's outcome refused: the job changed under the worker",
				append(args, "job_attempts", job.Attempts, "job_status", job.Status, "outcome_error", o.err)...)
		}
	}
}

// refusal reports whether err is the server refusing a statement, which
// may happen again, rather than the session or the server going away, or
// an error that passes: what was sent may well go through if sent again,
// so it is sent again rather than made a failure.
func refusal(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	if pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC" || passing(pgErr.Code) {
		return false
	}
	var ce *pgconn.ConnectError
	return !errors.As(err, &ce)
}

// passing reports whether SQLSTATE code says nothing against the statement
// that got it, only about the moment it ran.
func passing(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), // connection exception
		strings.HasPrefix(code, "57"), // operator intervention: shutdown, cancel, terminate, statement timeout
		strings.HasPrefix(code, "53"), // insufficient resources
		strings.HasPrefix(code, "40"), // transaction rollback: deadlock, serialization failure
		code == "55P03",               // lock not available: a lock timeout, NOWAIT
		code == "25006":               // read-only transaction: the server became a standby (a failover)
		return true
	}
	return false
}

// storable makes s storable in jsonb and at most n bytes: jsonb cannot hold
// a NUL character, so each is written out as \x00.
func storable(s string, n int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", `\x00`)
	if len(s) <= n {
		return s
	}
	const marker = "…(truncated)"
	cut := max(n-len(marker), 0)
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + marker
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
