package taskspec

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
)

// Spec is a task's settings, generated from its declaration.
type Spec[T any] struct {
	Kind     string
	Defaults runtime.EnqueueOptions // queue, priority, attempts, group policy
	Timeout  time.Duration          // zero: the worker's default
	Backoff  runtime.Backoff
	Mode     runtime.Mode // empty: either
	// MaxSnoozes caps the job's snoozes (runtime.Registration.MaxSnoozes);
	// zero: runtime.DefaultMaxSnoozes.
	MaxSnoozes int
	// GroupField names the group key field (for messages); GroupKey reads it.
	// Both are empty for ungrouped tasks.
	GroupField string
	GroupKey   func(T) string
	// LimitField names the field tagged task:"limit" (for messages);
	// LimitKey reads it: the key the declared limit (Defaults.Limit)
	// counts jobs by. Both are empty when the limit is the queue's own,
	// or there is none.
	LimitField string
	LimitKey   func(T) string
	// RateField names the field tagged task:"rate" (for messages);
	// RateKey reads it: the key the declared rate (Defaults.Rate) counts
	// starts by. Both are empty when the rate is the kind's own
	// (Defaults.RateKey), or there is none.
	RateField string
	RateKey   func(T) string
	// TenantField names the field tagged task:"tenant" (for messages);
	// TenantKey reads it: the job's tenant in its fair queue (Defaults.Fair).
	// Both are empty when the task names no tenant: its jobs are tenant "".
	TenantField string
	TenantKey   func(T) string
	// UniqueByPayload makes each job unique by its whole payload: its
	// unique key is a digest of the payload's JSON (see
	// runtime.EnqueueOptions.UniqueKey), unless the caller gives one; an
	// empty one is refused.
	UniqueByPayload bool
	// UniqueFields names the fields tagged task:"unique" (for messages);
	// UniqueValues reads them. The job's unique key is their values' JSON,
	// or a digest of it when that is long (see uniqueKey), unless the
	// caller gives one; an empty one is refused.
	UniqueFields []string
	UniqueValues func(T) []any
}

// maxPlainUniqueKey is the longest JSON of unique fields kept as it is in
// the key; a longer one is replaced by its SHA-256.
const maxPlainUniqueKey = 200

func (s *Spec[T]) request(t T, opts []runtime.EnqueueOption) (runtime.EnqueueRequest, error) {
	if err := runtime.Validate(s.Kind, t); err != nil {
		return runtime.EnqueueRequest{}, err
	}
	payload, err := json.Marshal(t)
	if err != nil {
		return runtime.EnqueueRequest{}, fmt.Errorf("encode %s: %w", s.Kind, err)
	}
	req := runtime.EnqueueRequest{Kind: s.Kind, Payload: payload, EnqueueOptions: s.Defaults}
	if s.UniqueByPayload {
		sum := sha256.Sum256(payload)
		req.UniqueKey = "payload:" + hex.EncodeToString(sum[:])
	}
	if s.UniqueValues != nil {
		if req.UniqueKey, err = s.uniqueKey(t); err != nil {
			return runtime.EnqueueRequest{}, err
		}
	}
	var groupErr, limitErr, rateErr error
	if s.GroupKey != nil {
		req.Group, groupErr = s.key(t, "group", s.GroupField, s.GroupKey)
	}
	if s.LimitKey != nil {
		req.LimitKey, limitErr = s.key(t, "limit", s.LimitField, s.LimitKey)
	}
	if s.RateKey != nil {
		req.RateKey, rateErr = s.key(t, "rate", s.RateField, s.RateKey)
	}
	if s.TenantKey != nil {
		if req.Tenant, err = s.key(t, "tenant", s.TenantField, s.TenantKey); err != nil {
			return runtime.EnqueueRequest{}, err
		}
	}
	req.Apply(opts...)
	// A key of the caller's own replaces the declared one, but none at all
	// would make the job silently not unique.
	if (s.UniqueByPayload || s.UniqueValues != nil) && req.UniqueKey == "" {
		return runtime.EnqueueRequest{}, fmt.Errorf("%s: its unique key comes from its declaration (%s); WithUniqueKey(\"\") cannot clear it",
			s.Kind, s.uniqueSource())
	}
	switch {
	case s.GroupKey == nil || req.Group != "":
		// WithGroup may stand in for a key that could not be read.
	case groupErr != nil:
		return runtime.EnqueueRequest{}, groupErr
	default:
		return runtime.EnqueueRequest{}, fmt.Errorf("%s: group key %s is empty", s.Kind, s.GroupField)
	}
	// An empty limit key would count the job under the queue's own limit:
	// refused, unless the caller's WithLimit says which limit it is under.
	if s.LimitKey != nil && req.Limit > 0 && req.LimitKey == "" && !setsLimit(opts) {
		if limitErr != nil {
			return runtime.EnqueueRequest{}, limitErr
		}
		return runtime.EnqueueRequest{}, fmt.Errorf("%s: limit key %s is empty", s.Kind, s.LimitField)
	}
	// Likewise an empty rate key, unless WithRate says which rate it is
	// under.
	if s.RateKey != nil && req.Rate > 0 && req.RateKey == "" && !setsRate(opts) {
		if rateErr != nil {
			return runtime.EnqueueRequest{}, rateErr
		}
		return runtime.EnqueueRequest{}, fmt.Errorf("%s: rate key %s is empty", s.Kind, s.RateField)
	}
	return req, nil
}

// setsLimit reports whether opts set the job's limit (WithLimit). Options
// only set fields, so applying them to a probe changes nothing else.
func setsLimit(opts []runtime.EnqueueOption) bool {
	probe := runtime.EnqueueRequest{EnqueueOptions: runtime.EnqueueOptions{Limit: -1}}
	probe.Apply(opts...)
	return probe.Limit != -1
}

// setsRate reports whether opts set the job's rate (WithRate).
func setsRate(opts []runtime.EnqueueOption) bool {
	probe := runtime.EnqueueRequest{EnqueueOptions: runtime.EnqueueOptions{Rate: -1}}
	probe.Apply(opts...)
	return probe.Rate != -1
}

// uniqueKey makes t's unique key from its unique fields: "fields:" and
// their values' JSON array, or, when that is longer than
// maxPlainUniqueKey, "fields-sha256:" and its digest. Equal values give
// equal keys; JSON's encoding of maps sorts their keys.
func (s *Spec[T]) uniqueKey(t T) (string, error) {
	b, err := json.Marshal(s.UniqueValues(t))
	if err != nil {
		return "", fmt.Errorf("%s: unique key from %v: %w", s.Kind, s.UniqueFields, err)
	}
	if len(b) <= maxPlainUniqueKey {
		return "fields:" + string(b), nil
	}
	sum := sha256.Sum256(b)
	return "fields-sha256:" + hex.EncodeToString(sum[:]), nil
}

// uniqueSource says what the declared unique key is made of, for errors.
func (s *Spec[T]) uniqueSource() string {
	if s.UniqueByPayload {
		return "its payload"
	}
	return "fields " + strings.Join(s.UniqueFields, ", ")
}

// key reads t's group, limit or rate key (role) from its field with read. A
// String method that panics (on a value it does not expect) makes an error,
// not a crash of the caller.
func (s *Spec[T]) key(t T, role, field string, read func(T) string) (key string, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%s: reading %s key %s panicked: %v", s.Kind, role, field, v)
		}
	}()
	return read(t), nil
}

// Enqueue validates t and inserts it as a job. opts override the task's
// declared settings.
func Enqueue[T any](ctx context.Context, db runtime.DB, spec *Spec[T], t T, opts ...runtime.EnqueueOption) (runtime.JobID, error) {
	req, err := spec.request(t, opts)
	if err != nil {
		return 0, &runtime.EnqueueError{Index: 0, Kind: spec.Kind, Err: err}
	}
	return runtime.Enqueue(ctx, db, req)
}

// EnqueueMany validates every element and inserts them all in one
// statement, or none: one invalid element stops the batch.
func EnqueueMany[T any](ctx context.Context, db runtime.DB, spec *Spec[T], ts []T, opts ...runtime.EnqueueOption) ([]runtime.JobID, error) {
	reqs := make([]runtime.EnqueueRequest, len(ts))
	for i, t := range ts {
		req, err := spec.request(t, opts)
		if err != nil {
			return nil, &runtime.EnqueueError{Index: i, Kind: spec.Kind, Err: err, Batch: len(ts) > 1}
		}
		reqs[i] = req
	}
	return runtime.EnqueueMany(ctx, db, reqs)
}

// Request validates t and returns it as a request of spec's kind, with
// the task's declared settings and opts over them: what EnqueueBatch takes
// as a callback, and runtime.EnqueueMany as a job. A workflow's step is
// added with the generated Add function instead: its inputs make its
// dependencies, which a request does not carry.
//
// An invalid t returns the error itself, which names the kind and what is
// wrong (a *runtime.ValidationError names the fields): nothing is
// enqueued, so there is no *runtime.EnqueueError and no place in a batch
// to give.
func Request[T any](spec *Spec[T], t T, opts ...runtime.EnqueueOption) (runtime.EnqueueRequest, error) {
	req, err := spec.request(t, opts)
	if err != nil {
		return runtime.EnqueueRequest{}, err
	}
	return req, nil
}

// EnqueueBatch validates every element and inserts them as a batch with
// the callbacks of batch (see runtime.EnqueueBatch), in one statement, or
// nothing: one invalid element stops the batch. opts apply to the
// elements, not to the callbacks, which are requests of their own.
func EnqueueBatch[T any](ctx context.Context, db runtime.DB, spec *Spec[T], ts []T, batch runtime.BatchOptions, opts ...runtime.EnqueueOption) (runtime.BatchID, []runtime.JobID, error) {
	reqs := make([]runtime.EnqueueRequest, len(ts))
	for i, t := range ts {
		req, err := spec.request(t, opts)
		if err != nil {
			return 0, nil, &runtime.EnqueueError{Index: i, Kind: spec.Kind, Err: err, Batch: true}
		}
		reqs[i] = req
	}
	return runtime.EnqueueBatch(ctx, db, reqs, batch)
}

// AddStep validates t and adds it to wf as a step that depends on the
// steps its inputs are set from (the task's Input fields, which the
// generator lists) and on the dependencies among opts. A request that
// fails validation is kept as wf's error, which its Enqueue returns.
func AddStep[T any](wf *runtime.Workflow, spec *Spec[T], t T, inputs []runtime.Dep, opts ...runtime.StepOption) runtime.Step {
	eo, deps := runtime.SplitStepOptions(opts)
	req, err := spec.request(t, eo)
	if err != nil {
		req.Kind = spec.Kind
	}
	return wf.AddStep(req, err, append(inputs, deps...)...)
}

// AddStepWithResult is AddStep for a task with a result of type R: its
// step's Output feeds the Input[R] fields of later steps.
func AddStepWithResult[R, T any](wf *runtime.Workflow, spec *Spec[T], t T, inputs []runtime.Dep, opts ...runtime.StepOption) runtime.StepWithResult[R] {
	return runtime.StepWithResult[R]{Step: AddStep(wf, spec, t, inputs, opts...)}
}

// decode reads and re-validates a job's payload. Either failing is final:
// the same payload fails the same way on every attempt.
func (s *Spec[T]) decode(job *runtime.Job) (T, error) {
	t, err := runtime.DecodePayload[T](job)
	if err != nil {
		return t, err
	}
	if err := runtime.Validate(s.Kind, t); err != nil {
		return t, runtime.NoRetry(fmt.Errorf("payload of job %d: %w", job.ID, err))
	}
	return t, nil
}

func (s *Spec[T]) registration(h runtime.Handler) runtime.Registration {
	queue := s.Defaults.Queue
	if queue == "" {
		queue = runtime.DefaultQueue
	}
	return runtime.Registration{Kind: s.Kind, Queue: queue, Handler: h, Timeout: s.Timeout, Backoff: s.Backoff, Mode: s.Mode,
		MaxSnoozes: s.MaxSnoozes}
}

// Handle registers fn as the handler of spec's task on w.
func Handle[T any](w *runtime.Worker, spec *Spec[T], fn func(ctx context.Context, job *runtime.Job, t T) error) error {
	if fn == nil {
		return fmt.Errorf("handle %s: handler is nil", spec.Kind)
	}
	return w.Register(spec.registration(func(ctx context.Context, job *runtime.Job) error {
		t, err := spec.decode(job)
		if err != nil {
			return err
		}
		return fn(ctx, job, t)
	}))
}

// HandleWithResult registers fn as the handler of spec's task on w; the R it
// returns with a nil error is stored as the job's result.
func HandleWithResult[T, R any](w *runtime.Worker, spec *Spec[T], fn func(ctx context.Context, job *runtime.Job, t T) (R, error)) error {
	if fn == nil {
		return fmt.Errorf("handle %s: handler is nil", spec.Kind)
	}
	reg := spec.registration(func(ctx context.Context, job *runtime.Job) error {
		t, err := spec.decode(job)
		if err != nil {
			return err
		}
		r, err := fn(ctx, job, t)
		if err != nil {
			return err
		}
		return job.SetResult(r)
	})
	reg.HasResult = true
	return w.Register(reg)
}

// Result reads the result of job id, which must be of spec's kind, with its
// status. The result is the zero R and the error wraps runtime.ErrNoResult
// until the job has succeeded.
func Result[R, T any](ctx context.Context, db runtime.DB, spec *Spec[T], id runtime.JobID) (R, runtime.Status, error) {
	var r R
	info, err := runtime.GetJob(ctx, db, id)
	if err != nil {
		return r, "", err
	}
	if info.Kind != spec.Kind {
		return r, info.Status, fmt.Errorf("job %d is a %s job, not %s", id, info.Kind, spec.Kind)
	}
	if info.Status != runtime.StatusSucceeded {
		return r, info.Status, fmt.Errorf("job %d is %s: %w", id, info.Status, runtime.ErrNoResult)
	}
	if err := json.Unmarshal(info.Result, &r); err != nil {
		return r, info.Status, fmt.Errorf("decode result of job %d: %w", id, err)
	}
	return r, info.Status, nil
}

// WaitResult waits until job id, which must be of spec's kind, has finished
// (see runtime.WaitJobs) and returns its result, or a *runtime.JobFailedError
// when it failed or was cancelled.
func WaitResult[R, T any](ctx context.Context, pool *pgxpool.Pool, spec *Spec[T], id runtime.JobID) (R, error) {
	var r R
	infos, err := runtime.WaitJobs(ctx, pool, []runtime.JobID{id})
	if err != nil {
		return r, err
	}
	if infos[0].Kind != spec.Kind {
		return r, fmt.Errorf("job %d is a %s job, not %s", id, infos[0].Kind, spec.Kind)
	}
	return runtime.DecodeResult[R](infos[0])
}

// Results reads the results of the jobs ids, which must be of spec's kind,
// in one round trip, in the order of ids (see runtime.JobResult).
func Results[R, T any](ctx context.Context, db runtime.DB, spec *Spec[T], ids []runtime.JobID) ([]runtime.JobResult[R], error) {
	infos, err := runtime.GetJobs(ctx, db, ids)
	if err != nil {
		return nil, err
	}
	out := make([]runtime.JobResult[R], len(ids))
	for i, info := range infos {
		out[i].ID = ids[i]
		switch {
		case info == nil:
			out[i].Err = fmt.Errorf("get job %d: %w", ids[i], runtime.ErrJobNotFound)
		case info.Kind != spec.Kind:
			out[i].Status = info.Status
			out[i].Err = fmt.Errorf("job %d is a %s job, not %s", ids[i], info.Kind, spec.Kind)
		default:
			out[i].Status = info.Status
			out[i].Value, out[i].Err = runtime.DecodeResult[R](info)
		}
	}
	return out, nil
}
