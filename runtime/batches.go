package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/gen"
)

// parkedAt is when a batch's callback is scheduled until its batch
// releases it: pgtask.parked_at() (functions/batches.sql).
const parkedAt = "9999-12-31T23:59:59Z"

// BatchID identifies a batch (see EnqueueBatch).
type BatchID int64

// BatchMetadataKey is the metadata key under which a batch's callback job
// finds the batch's summary (see BatchSummaryOf). A callback may not be
// enqueued with it.
const BatchMetadataKey = "pgtask.batch"

// BatchOptions names a batch's callbacks: jobs enqueued together with the
// batch, which wait until the batch releases them. Each is optional.
// A callback runs as any job of its kind (its handler, retries and options
// apply), once; its handler reads the batch's counts with BatchSummaryOf.
// A callback may not be grouped, unique, or given RunAt or Delay: it runs
// when its batch says. The generated Request<Task> makes one from a
// declared task's value, validated.
type BatchOptions struct {
	// OnFinish runs once all the batch's jobs have finished: succeeded,
	// failed for good, or cancelled (a job deleted before it finished
	// counts as deleted).
	OnFinish *EnqueueRequest
	// OnFailure runs once, when the first of the batch's jobs has failed
	// for good, while the others may still run. It is cancelled when the
	// batch ends without a failure.
	OnFailure *EnqueueRequest
}

// BatchSummary is a batch's counts as a callback sees them.
type BatchSummary struct {
	BatchID BatchID `json:"batch_id"`
	// Total is how many jobs the batch was enqueued with.
	Total     int `json:"total"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	// Deleted counts the jobs that were gone (deleted by an operator, or
	// by retention) when the counts were taken.
	Deleted int `json:"deleted"`
	// Finished is true for OnFinish: all jobs had finished. For OnFailure
	// it is false, and the counts are those of when the failure was found.
	Finished bool `json:"finished"`
}

// The EnqueueError.Index of EnqueueBatch's callbacks.
const (
	BatchOnFinish  = -1
	BatchOnFailure = -2
)

// ErrNotBatchCallback is returned by BatchSummaryOf for a job that no batch
// released.
var ErrNotBatchCallback = errors.New("pgtask: the job is not a batch's callback")

// BatchSummaryOf returns the summary of the batch that released job, a
// callback of BatchOptions.
func BatchSummaryOf(job *Job) (BatchSummary, error) {
	raw, ok := job.Metadata[BatchMetadataKey]
	if !ok {
		return BatchSummary{}, ErrNotBatchCallback
	}
	var s BatchSummary
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return BatchSummary{}, fmt.Errorf("pgtask: job %d: decode its batch summary: %w", job.ID, err)
	}
	return s, nil
}

// Batch is a batch's state (see GetBatch).
type Batch struct {
	ID    BatchID
	Total int
	// The callbacks' job ids; 0 for none.
	OnFinish  JobID
	OnFailure JobID
	CreatedAt time.Time
	// FailedAt is when the first failed job was found, if the batch has an
	// OnFailure callback and one was; nil otherwise.
	FailedAt *time.Time
	// FinishedAt is when the batch ended (nil while it is open). The counts
	// of an ended batch are those of then; an open batch's are its jobs'
	// now.
	FinishedAt *time.Time
	Succeeded  int
	Failed     int
	Cancelled  int
	Deleted    int
}

// Finished reports whether the batch has ended.
func (b *Batch) Finished() bool { return b.FinishedAt != nil }

// ErrBatchNotFound is returned by GetBatch for an id with no batch.
var ErrBatchNotFound = errors.New("pgtask: batch not found")

// GetBatch reads a batch's state.
func GetBatch(ctx context.Context, db DB, id BatchID) (*Batch, error) {
	r, err := gen.New(db).GetBatch(ctx, int64(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("batch %d: %w", id, ErrBatchNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get batch %d: %w", id, err)
	}
	return &Batch{ID: BatchID(r.ID), Total: int(r.Total), OnFinish: JobID(r.OnFinish), OnFailure: JobID(r.OnFailure),
		CreatedAt: r.CreatedAt, FailedAt: r.FailedAt, FinishedAt: r.FinishedAt,
		Succeeded: int(r.Succeeded), Failed: int(r.Failed), Cancelled: int(r.Cancelled), Deleted: int(r.Deleted)}, nil
}

// EnqueueBatch inserts jobs as a batch, with its callbacks, in one
// statement: either all of it exists or none (pass a pgx.Tx to make it part
// of your transaction). It returns the batch's id and the jobs' ids in the
// order of reqs. The callbacks' ids are in GetBatch's answer.
//
// Every job must be new: a request with a unique key is refused, like an
// empty batch and a callback without a kind; each such error is an
// *EnqueueError (Index BatchOnFinish or BatchOnFailure for a callback) or, for the batch
// as a whole, an error saying what is wrong. Nothing is inserted then.
func EnqueueBatch(ctx context.Context, db DB, reqs []EnqueueRequest, opts BatchOptions) (BatchID, []JobID, error) {
	if len(reqs) == 0 {
		return 0, nil, errors.New("enqueue batch: a batch needs at least one job")
	}
	var all []EnqueueRequest
	var onFinish, onFailure bool
	for _, cb := range []struct {
		req   *EnqueueRequest
		index int
		set   *bool
	}{{opts.OnFinish, BatchOnFinish, &onFinish}, {opts.OnFailure, BatchOnFailure, &onFailure}} {
		if cb.req == nil {
			continue
		}
		r := *cb.req
		if err := runEnqueueHooks(ctx, &r); err != nil {
			return 0, nil, &EnqueueError{Index: cb.index, Kind: r.Kind, Err: err, Batch: true}
		}
		if err := checkCallback(&r); err != nil {
			return 0, nil, &EnqueueError{Index: cb.index, Kind: r.Kind, Err: err, Batch: true}
		}
		r.parked = true
		all = append(all, r)
		*cb.set = true
	}
	ncb := len(all)
	for i := range reqs {
		r := reqs[i]
		if err := runEnqueueHooks(ctx, &r); err != nil {
			return 0, nil, &EnqueueError{Index: i, Kind: r.Kind, Err: err, Batch: true}
		}
		if err := r.check(); err != nil {
			return 0, nil, &EnqueueError{Index: i, Kind: r.Kind, Err: err, Batch: true}
		}
		if r.UniqueKey != "" {
			return 0, nil, &EnqueueError{Index: i, Kind: r.Kind, Err: errors.New("a batch's jobs cannot be unique (their key could name another's job)"), Batch: true}
		}
		all = append(all, r)
	}
	b := newBatch(len(all))
	for i := range all {
		b.add(&all[i])
	}
	p := b.p
	row, err := gen.New(db).InsertBatch(ctx, gen.InsertBatchParams{
		OnFinish: onFinish, OnFailure: onFailure,
		Payloads: p.Payloads, Settings: p.Settings, Groups: p.Groups, Kinds: p.Kinds, Queues: p.Queues,
		Priorities: p.Priorities, AgingMs: p.AgingMs, MaxAttempts: p.MaxAttempts, FailBlocksGroup: p.FailBlocksGroup,
		RunAt: p.RunAt, DelayUs: p.DelayUs, GroupQueues: p.GroupQueues, GroupKeys: p.GroupKeys,
		UniqueKeys: p.UniqueKeys, UniqueWindowsUs: p.UniqueWindowsUs, UniqueStatuses: p.UniqueStatuses, Metadata: p.Metadata,
		Limits: p.Limits, LimitQueues: p.LimitQueues, LimitKeys: p.LimitKeys, LimitMax: p.LimitMax, LimitStrategies: p.LimitStrategies,
		Rates: p.Rates, RateQueues: p.RateQueues, RateKeys: p.RateKeys, RateN: p.RateN, RatePeriodUs: p.RatePeriodUs,
		RateBurst: p.RateBurst,
		Fair:      p.Fair, FairQueues: p.FairQueues, FairTenants: p.FairTenants,
	})
	if err != nil {
		return 0, nil, fmt.Errorf("enqueue batch of %d job(s): %w", len(reqs), err)
	}
	if len(row.Ids) != len(all) {
		return 0, nil, fmt.Errorf("enqueue batch: %d ids for %d requests", len(row.Ids), len(all))
	}
	ids := make([]JobID, len(reqs))
	for i := range ids {
		ids[i] = JobID(row.Ids[ncb+i])
	}
	return BatchID(row.BatchID), ids, nil
}

// checkCallback checks a batch's callback: a request like any other, that
// runs when its batch says.
func checkCallback(r *EnqueueRequest) error {
	if r.Kind == "" {
		return errors.New("the callback's kind is empty")
	}
	if err := r.check(); err != nil {
		return err
	}
	switch {
	case r.Group != "":
		return errors.New("a batch's callback cannot be grouped")
	case r.UniqueKey != "":
		return errors.New("a batch's callback cannot be unique")
	case !r.RunAt.IsZero() || r.Delay != 0:
		return errors.New("a batch's callback cannot have RunAt or Delay: it runs when its batch releases it")
	}
	if _, ok := r.Metadata[BatchMetadataKey]; ok {
		return fmt.Errorf("a batch's callback cannot have metadata key %q: the batch's summary goes there", BatchMetadataKey)
	}
	return nil
}
