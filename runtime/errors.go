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

// PanicError is the error recorded when a handler panics.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// EnqueueError reports a request that was refused before anything was
// inserted.
type EnqueueError struct {
	Index int // the request's position in its batch; 0 for a single Enqueue
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
	if e.Batch {
		return fmt.Sprintf("%s (item %d of the batch): %v", what, e.Index, e.Err)
	}
	return fmt.Sprintf("%s: %v", what, e.Err)
}

func (e *EnqueueError) Unwrap() error { return e.Err }
