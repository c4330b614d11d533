package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/pgtask/pgtask/gen"
)

// execute runs one claimed job of the session's transaction and returns how
// it ended. A failed job's writes are rolled back to its savepoint here, so
// the batch's other jobs commit; recording the outcome is settle's. It
// returns an abandonment instead when the handler ignored its context past
// AbandonGrace: the transaction can no longer be used.
func (s *session) execute(hard context.Context, row gen.ClaimJobsRow) (outcome, *abandonment) {
	r := s.r
	job := newJob(row)
	jtx := &jobTx{Tx: s.tx, savepoint: gen.New(s.tx).SavepointJob}
	job.tx = jtx
	o := r.w.newOutcome(row)
	if o.reg == nil {
		return o, nil
	}
	var done <-chan error
	o.err, done = r.w.call(hard, o.reg, job)
	o.retryNow = hard.Err() != nil
	if done != nil {
		r.w.log.Error("pgtask: abandoning a handler that ignores its context", "job_id", row.ID, "kind", row.Kind, "error", o.err)
		return o, &abandonment{outcome: o, done: done}
	}
	s.closeAttempt(hard, jtx, &o, job)
	o.wrote = o.err == nil && jtx.taken
	if s.conn.Conn().IsClosed() {
		// Whatever the handler returned, its writes are gone with the
		// session; settling fails next, and settleLost records the attempt.
		o.lost = true
	}
	return o, nil
}

// closeAttempt keeps a successful attempt's writes (releasing its savepoint)
// or rolls a failed one's back to it.
func (s *session) closeAttempt(hard context.Context, jtx *jobTx, o *outcome, job *Job) {
	q := gen.New(s.tx)
	ctx, cancel := bookCtx(hard)
	defer cancel()
	if o.err == nil {
		o.result = job.result
		if !jtx.taken {
			return
		}
		err := q.ReleaseJobSavepoint(ctx)
		if err == nil {
			return
		}
		// Typically a statement the handler ran failed and it ignored the
		// error: the transaction is aborted.
		o.result = nil
		o.err = fmt.Errorf("the handler returned success but its transaction failed: %w", err)
	}
	if jtx.taken {
		if err := q.RollbackJobSavepoint(ctx); err != nil {
			// The transaction is unusable; settling it will fail, and
			// settleLost records this outcome.
			o.err = fmt.Errorf("%w (and rolling back its writes failed: %v)", o.err, err)
		}
	}
}

// newOutcome starts the outcome of a claimed job's attempt. Without a
// handler for the kind it is already a failure, retried like any: a newer
// worker may know the kind.
func (w *Worker) newOutcome(row gen.ClaimJobsRow) outcome {
	o := outcome{row: row, reg: w.handler(row.Kind), start: time.Now()}
	if o.reg == nil {
		o.err = fmt.Errorf("no handler for kind %q in this worker (it handles %v)", row.Kind, w.kinds())
	}
	return o
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
		Payload:     row.Payload,
		CreatedAt:   row.CreatedAt,
		RunAfter:    row.RunAfter,
		Metadata:    decodeMetadata(row.Metadata),
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
	cancellable, cancelCause := context.WithCancelCause(hard)
	defer cancelCause(nil)
	remove, heard := w.running.add(job, cancelCause)
	defer remove()
	if heard {
		w.maint.cancel.confirm(hard, attemptRef{job.ID, job.Attempt})
	}
	if errors.Is(context.Cause(cancellable), ErrJobCancelled) {
		// Cancelled while it waited in its batch: the handler never runs.
		return fmt.Errorf("%w before the attempt started", ErrJobCancelled), nil
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
			return cancelledDuring(err), nil
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
			return cancelledDuring(err), nil
		case !timedOut():
			return fmt.Errorf("worker shut down during the attempt: %w", nonNil(err, ctx.Err())), nil
		}
		return fmt.Errorf("timed out after %s: %w", reg.Timeout, nonNil(err, ctx.Err())), nil
	case <-grace.C:
		if cancelled() {
			return fmt.Errorf("%w, and the handler ignored the cancellation for %s; abandoned", ErrJobCancelled, w.cfg.AbandonGrace), done
		}
		return fmt.Errorf("timed out after %s and ignored cancellation for %s; abandoned", reg.Timeout, w.cfg.AbandonGrace), done
	}
}

// cancelledDuring is the outcome of an attempt cancelled by an operator
// whose handler returned err: a handler that finished its work anyway
// succeeded.
func cancelledDuring(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w during the attempt: %w", ErrJobCancelled, err)
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
