package runtime

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/pgtask/pgtask/gen"
)

// A job's path through the worker is the same in both modes:
//
//   - claim: a committed claim takes the job, counting its attempt before
//     any handler runs (held: runner.work, lease: leaser.turn);
//   - execute: attempt builds its Job, finds its handler and calls it,
//     with the transaction the mode binds to it (held: the job
//     transaction, behind a savepoint of the job's own; lease: a lazyTx);
//   - record: the outcome goes through queueSettle to pgtask.settle_jobs,
//     fenced by the mode (held: the job's row lock; lease: its attempt and
//     claim token), and once that commits, through recorded.
//
// The two modes differ in how a claim is kept while its jobs run (held:
// the job transaction's locks on one connection per runner; lease: a lease
// that a heartbeat extends, with no connection held) and so in their loops:
// held.go and lease.go.

// attempt is the execute step of both modes: it runs the handler of a
// claimed job, after bind has given the Job what its mode provides (its
// transaction, its lease), and returns how the attempt ended: the
// handler's error, or its result. Without a handler for the kind the
// outcome is already a failure, retried like any (a newer worker may know
// the kind), and nothing runs. When the handler ignored its context past
// AbandonGrace, abandoned is the channel its result will arrive on, if
// ever: the mode must then give up the transaction it bound.
func (w *Worker) attempt(hard context.Context, row gen.ClaimJobsRow, bind func(*Job)) (o outcome, abandoned <-chan error) {
	o = outcome{row: row, reg: w.handler(row.Kind), start: time.Now()}
	if o.reg == nil {
		o.err = fmt.Errorf("no handler for kind %q in this worker (it handles %v)", row.Kind, w.kinds())
		return o, nil
	}
	job := newJob(row)
	job.MaxSnoozes = o.snoozeCap()
	bind(job)
	job.progress = w.newProgressReporter(hard, job)
	// The last progress reported lands before the outcome is recorded,
	// while the attempt is still the job's current one; an abandoned
	// handler reports nothing more.
	defer job.progress.finish()
	o.err, abandoned = w.call(hard, o.reg, job)
	if abandoned != nil {
		w.log.Error("pgtask: abandoning a handler that ignores its context", "job_id", row.ID, "kind", row.Kind, "error", o.err)
		return o, abandoned
	}
	if o.err == nil {
		o.result = job.result
	}
	return o, nil
}

// handler is the registration of kind, or nil: the step that finds a
// claimed job's handler.
func (w *Worker) handler(kind string) *Registration {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.handlers[kind]
}

// handle runs reg's handler on job through the worker's middleware.
func (w *Worker) handle(ctx context.Context, reg *Registration, job *Job) error {
	next := reg.Handler
	for i := len(w.cfg.Middleware) - 1; i >= 0; i-- {
		m, inner := w.cfg.Middleware[i], next
		next = func(ctx context.Context, job *Job) error { return m(ctx, job, inner) }
	}
	return next(ctx, job)
}

func newJob(row gen.ClaimJobsRow) *Job {
	return &Job{
		ID:          JobID(row.ID),
		Kind:        row.Kind,
		Queue:       row.Queue,
		Group:       row.GroupKey, // empty for an ungrouped job
		Priority:    row.Priority,
		Attempt:     int(row.Attempts),
		MaxAttempts: int(row.MaxAttempts),
		Snoozes:     int(row.Snoozes),
		Payload:     row.Payload,
		CreatedAt:   row.CreatedAt,
		RunAfter:    row.RunAfter,
		Metadata:    decodeMetadata(row.Metadata),

		cancelCause: row.CancelCause,
	}
}

// decodeMetadata decodes a job's stored metadata. The schema keeps it an
// object; a value that is not a string (written by hand) comes as its JSON.
func decodeMetadata(b json.RawMessage) map[string]string {
	if len(b) == 0 {
		return nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil
	}
	m := make(map[string]string, len(raw))
	for k, v := range raw {
		s := string(v)
		if len(v) > 0 && v[0] == '"' {
			if err := json.Unmarshal(v, &s); err != nil {
				s = string(v)
			}
		}
		m[k] = s
	}
	return m
}

// call runs the handler with its timeout, recovering a panic. It gives up on
// a handler that ignores its context for AbandonGrace past the timeout and
// then returns the channel the handler's result will arrive on, if ever.
func (w *Worker) call(hard context.Context, reg *Registration, job *Job) (error, <-chan error) {
	cancellable, stop := context.WithCancelCause(hard)
	defer stop(nil)
	remove, heard := w.running.add(job, stop)
	defer remove()
	switch {
	case job.cancelCause != "":
		// Cancelled before its claim: as an earlier attempt ended, or with
		// its workflow.
		stop(cancelCause(job.cancelCause))
	case heard:
		w.maint.cancel.confirm(hard, attemptRef{job.ID, job.Attempt})
	}
	if cause := context.Cause(cancellable); errors.Is(cause, ErrJobCancelled) {
		// Cancelled before it started, or while it waited in its batch:
		// the handler never runs.
		return fmt.Errorf("%w before the attempt started", cause), nil
	}
	ctx, cancel := context.WithTimeout(cancellable, reg.Timeout)
	defer cancel() // an abandoned handler's context is past its deadline already
	done := make(chan error, 1)
	w.spare.do(func() {
		defer func() {
			if v := recover(); v != nil {
				done <- &PanicError{Value: v, Stack: debug.Stack()}
			}
		}()
		done <- w.handle(ctx, reg, job)
	})
	timedOut := func() bool { return errors.Is(ctx.Err(), context.DeadlineExceeded) && hard.Err() == nil }
	// The cause of ctx is whichever came first: a cancel after the
	// deadline leaves the attempt timed out.
	cancelled := func() bool { return errors.Is(context.Cause(ctx), ErrJobCancelled) && hard.Err() == nil }
	select {
	case err := <-done:
		if cancelled() {
			return cancelledDuring(context.Cause(ctx), err), nil
		}
		if timedOut() {
			// Finished after its deadline: its writes may be cut short, so
			// the attempt fails whatever it returned.
			return fmt.Errorf("timed out after %s: %w", reg.Timeout, nonNil(err, ctx.Err())), nil
		}
		return err, nil
	case <-ctx.Done():
	}
	grace := time.NewTimer(w.cfg.AbandonGrace)
	defer grace.Stop()
	select {
	case err := <-done:
		switch {
		case cancelled():
			return cancelledDuring(context.Cause(ctx), err), nil
		case !timedOut():
			return fmt.Errorf("worker shut down during the attempt: %w", nonNil(err, ctx.Err())), nil
		}
		return fmt.Errorf("timed out after %s: %w", reg.Timeout, nonNil(err, ctx.Err())), nil
	case <-grace.C:
		if cancelled() {
			return fmt.Errorf("%w, and the handler ignored the cancellation for %s; abandoned", context.Cause(ctx), w.cfg.AbandonGrace), done
		}
		return fmt.Errorf("timed out after %s and ignored cancellation for %s; abandoned", reg.Timeout, w.cfg.AbandonGrace), done
	}
}

// cancelledDuring is the outcome of an attempt cancelled for cause (an
// error that is ErrJobCancelled: see cancelCause) whose handler returned
// err: a handler that finished its work anyway succeeded.
func cancelledDuring(cause, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w during the attempt: %w", cause, err)
}

// abandonment is a handler the runner gave up on: outcome is its recorded
// failure, and done delivers its result if it ever returns.
type abandonment struct {
	outcome outcome
	done    <-chan error
}

func (a *abandonment) Error() string {
	return fmt.Sprintf("job %d: %v: %v", a.outcome.row.ID, errAbandoned, a.outcome.err)
}

func (a *abandonment) Unwrap() error { return errAbandoned }

func nonNil(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

var errAbandoned = errors.New("handler abandoned")

// byID orders claimed jobs by id: a group's jobs in the order they run.
func byID(a, b gen.ClaimJobsRow) int { return cmp.Compare(a.ID, b.ID) }

func ids(rows []gen.ClaimJobsRow) []int64 {
	out := make([]int64, len(rows))
	for i, row := range rows {
		out[i] = row.ID
	}
	return out
}
