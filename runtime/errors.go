package runtime

import (
	"errors"
	"fmt"
	"time"
)

type noRetryError struct{ err error }

func (e *noRetryError) Error() string { return e.err.Error() }
func (e *noRetryError) Unwrap() error { return e.err }

// NoRetry marks a handler's error as final: the job fails now, whatever
// attempts it has left. Use it for errors that another attempt cannot fix.
func NoRetry(err error) error {
	if err == nil {
		err = errors.New("job failed")
	}
	return &noRetryError{err: err}
}

// IsNoRetry reports whether err, or an error it wraps, came from NoRetry.
func IsNoRetry(err error) bool {
	var nr *noRetryError
	return errors.As(err, &nr)
}

type retryAfterError struct {
	err   error
	delay time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter fails the attempt and asks for the next one after delay instead
// of the task's backoff (for example when an API answered "retry in 30s").
// The attempt still counts toward the job's maximum.
func RetryAfter(delay time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &retryAfterError{err: err, delay: max(delay, 0)}
}

// SnoozeError is what Snooze returns: the handler asks for the job to run
// again after Delay, with no attempt spent. Find it with errors.As; a
// handler may wrap it.
type SnoozeError struct {
	Delay time.Duration // never negative
}

func (e *SnoozeError) Error() string { return fmt.Sprintf("snoozed for %s", e.Delay) }

// Snooze ends the attempt and has the job run again after delay (at once
// for zero; a negative delay counts as zero), for a job that waits on
// something outside it (a file not uploaded yet, an account not verified
// yet). Unlike RetryAfter it is not a failure: the attempt the claim
// counted is given back, nothing is added to the error history, and the
// job's snooze count rises instead. Like a failure it keeps nothing the
// attempt wrote through Job.Tx: its writes are rolled back, in both modes.
// A grouped job stays its group's head while it sleeps, so the jobs behind
// it wait. A job snoozed more often than its task's cap (max_snoozes,
// Registration.MaxSnoozes; DefaultMaxSnoozes) fails for good.
func Snooze(delay time.Duration) error {
	return &SnoozeError{Delay: max(delay, 0)}
}

// snoozeOf is the snooze err asks for, or nil.
func snoozeOf(err error) *SnoozeError {
	var se *SnoozeError
	if errors.As(err, &se) {
		return se
	}
	return nil
}

// PanicError is the error recorded when a handler panics.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// EnqueueError reports a request that was refused before anything was
// inserted.
type EnqueueError struct {
	// Index is the request's position in its batch; 0 for a single
	// Enqueue. For EnqueueBatch's callbacks it is BatchOnFinish or
	// BatchOnFailure.
	Index int
	Kind  string
	Err   error
	Batch bool // the request was one of several sent together
}

func (e *EnqueueError) Error() string {
	what := "enqueue " + e.Kind
	var ve *ValidationError
	if errors.As(e.Err, &ve) {
		what = "enqueue" // the validation error names the kind
	}
	switch {
	case e.Index == BatchOnFinish:
		return fmt.Sprintf("%s (the batch's OnFinish callback): %v", what, e.Err)
	case e.Index == BatchOnFailure:
		return fmt.Sprintf("%s (the batch's OnFailure callback): %v", what, e.Err)
	}
	if e.Batch {
		return fmt.Sprintf("%s (item %d of the batch): %v", what, e.Index, e.Err)
	}
	return fmt.Sprintf("%s: %v", what, e.Err)
}

func (e *EnqueueError) Unwrap() error { return e.Err }
