package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Task marks a struct as a task: embed it, with the task's settings in the
// tag of the embedded field, and run `pgtask gen` (see the README):
//
//	type SendEmail struct {
//		runtime.Task `task:"send_email,queue=emails,max_attempts=5,timeout=30s"`
//		AccountID    int64  `json:"account_id" task:"group"`
//		To           string `json:"to" validate:"required,email"`
//	}
type Task struct{}

// TaskWithResult marks a task whose handler returns an R, stored with the
// job as JSON and read back by the generated Get<Task>Result.
type TaskWithResult[R any] struct{}

// TaskSpec is a task's settings, generated from its declaration. The
// generated functions pass it to EnqueueTask, HandleTask and friends.
type TaskSpec[T any] struct {
	Kind     string
	Defaults EnqueueOptions // queue, priority, attempts, group policy
	Timeout  time.Duration  // zero: the worker's default
	Backoff  Backoff
	// GroupField names the group key field (for messages); GroupKey reads it.
	// Both are empty for ungrouped tasks.
	GroupField string
	GroupKey   func(T) string
}

func (s *TaskSpec[T]) request(t T, opts []EnqueueOption) (EnqueueRequest, error) {
	if err := Validate(s.Kind, t); err != nil {
		return EnqueueRequest{}, err
	}
	payload, err := json.Marshal(t)
	if err != nil {
		return EnqueueRequest{}, fmt.Errorf("encode %s: %w", s.Kind, err)
	}
	req := EnqueueRequest{Kind: s.Kind, Payload: payload, EnqueueOptions: s.Defaults}
	if s.GroupKey != nil {
		req.Group = s.GroupKey(t)
	}
	req.Apply(opts...)
	if s.GroupKey != nil && req.Group == "" {
		return EnqueueRequest{}, fmt.Errorf("%s: group key %s is empty", s.Kind, s.GroupField)
	}
	return req, nil
}

// EnqueueTask validates t and inserts it as a job. opts override the task's
// declared settings.
func EnqueueTask[T any](ctx context.Context, db DB, spec *TaskSpec[T], t T, opts ...EnqueueOption) (JobID, error) {
	req, err := spec.request(t, opts)
	if err != nil {
		return 0, &EnqueueError{Index: 0, Kind: spec.Kind, Err: err}
	}
	return Enqueue(ctx, db, req)
}

// EnqueueTasks validates every element and inserts them all in one
// statement, or none: one invalid element stops the batch.
func EnqueueTasks[T any](ctx context.Context, db DB, spec *TaskSpec[T], ts []T, opts ...EnqueueOption) ([]JobID, error) {
	reqs := make([]EnqueueRequest, len(ts))
	for i, t := range ts {
		req, err := spec.request(t, opts)
		if err != nil {
			return nil, &EnqueueError{Index: i, Kind: spec.Kind, Err: err, batch: len(ts) > 1}
		}
		reqs[i] = req
	}
	return EnqueueMany(ctx, db, reqs)
}

// decode reads and re-validates a job's payload. Either failing is final:
// the same payload fails the same way on every attempt.
func (s *TaskSpec[T]) decode(job *Job) (T, error) {
	t, err := DecodePayload[T](job)
	if err != nil {
		return t, err
	}
	if err := Validate(s.Kind, t); err != nil {
		return t, NoRetry(fmt.Errorf("payload of job %d: %w", job.ID, err))
	}
	return t, nil
}

func (s *TaskSpec[T]) registration(h Handler) Registration {
	return Registration{Kind: s.Kind, Handler: h, Timeout: s.Timeout, Backoff: s.Backoff}
}

// HandleTask registers fn as the handler of spec's task on w.
func HandleTask[T any](w *Worker, spec *TaskSpec[T], fn func(ctx context.Context, job *Job, t T) error) error {
	if fn == nil {
		return fmt.Errorf("handle %s: handler is nil", spec.Kind)
	}
	return w.Register(spec.registration(func(ctx context.Context, job *Job) error {
		t, err := spec.decode(job)
		if err != nil {
			return err
		}
		return fn(ctx, job, t)
	}))
}

// HandleTaskWithResult registers fn as the handler of spec's task on w; the
// R it returns with a nil error is stored as the job's result.
func HandleTaskWithResult[T, R any](w *Worker, spec *TaskSpec[T], fn func(ctx context.Context, job *Job, t T) (R, error)) error {
	if fn == nil {
		return fmt.Errorf("handle %s: handler is nil", spec.Kind)
	}
	return w.Register(spec.registration(func(ctx context.Context, job *Job) error {
		t, err := spec.decode(job)
		if err != nil {
			return err
		}
		r, err := fn(ctx, job, t)
		if err != nil {
			return err
		}
		return job.SetResult(r)
	}))
}

// ErrNoResult is returned by TaskResult for a job that has not succeeded
// (yet): the status says where it is.
var ErrNoResult = errors.New("pgtask: job has no result")

// TaskResult reads the result of job id, which must be of kind, with its
// status. The result is the zero R and the error wraps ErrNoResult until the
// job has succeeded.
func TaskResult[R any](ctx context.Context, db DB, kind string, id JobID) (R, Status, error) {
	var r R
	info, err := GetJob(ctx, db, id)
	if err != nil {
		return r, "", err
	}
	if info.Kind != kind {
		return r, info.Status, fmt.Errorf("job %d is a %s job, not %s", id, info.Kind, kind)
	}
	if info.Status != StatusSucceeded {
		return r, info.Status, fmt.Errorf("job %d is %s: %w", id, info.Status, ErrNoResult)
	}
	if err := json.Unmarshal(info.Result, &r); err != nil {
		return r, info.Status, fmt.Errorf("decode result of job %d: %w", id, err)
	}
	return r, info.Status, nil
}
