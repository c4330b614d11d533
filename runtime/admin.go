package runtime

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/gen"
)

// Status is where a job is in its life.
type Status string

const (
	StatusScheduled Status = "scheduled" // waiting for its time (a delay or a retry's backoff)
	StatusQueued    Status = "queued"    // runnable, or waiting for its group
	StatusStarted   Status = "started"   // an attempt is running
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// allStatuses are the statuses, in their order of the job's life.
var allStatuses = []Status{StatusScheduled, StatusQueued, StatusStarted, StatusSucceeded, StatusFailed, StatusCancelled}

// Finished reports whether the job will not run again by itself.
func (s Status) Finished() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCancelled
}

// AttemptError is one failed attempt in a job's history.
type AttemptError struct {
	Attempt int       `json:"attempt"`
	Error   string    `json:"error"`
	At      time.Time `json:"at"`
	Panic   bool      `json:"panic,omitempty"`
	Stack   string    `json:"stack,omitempty"`
}

// JobInfo is a job as stored.
type JobInfo struct {
	ID          JobID
	Kind        string
	Queue       string
	Group       string
	Status      Status
	Priority    int16
	Attempts    int
	MaxAttempts int
	Payload     json.RawMessage
	Result      json.RawMessage // set when the job succeeded with a result
	Errors      []AttemptError
	RunAfter    time.Time
	CreatedAt   time.Time
	StartedAt   *time.Time
	FinishedAt  *time.Time
}

// ErrJobNotFound is returned for an id with no job.
var ErrJobNotFound = errors.New("pgtask: job not found")

// GetJob reads a job.
func GetJob(ctx context.Context, db DB, id JobID) (*JobInfo, error) {
	j, err := gen.New(db).GetJob(ctx, int64(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("get job %d: %w", id, ErrJobNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get job %d: %w", id, err)
	}
	info := &JobInfo{
		ID: JobID(j.ID), Kind: j.Kind, Queue: j.Queue, Status: Status(j.Status), Priority: j.Priority,
		Attempts: int(j.Attempts), MaxAttempts: int(j.MaxAttempts), Payload: j.Payload, Result: j.Result,
		RunAfter: j.RunAfter, CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt,
	}
	if j.GroupKey != nil {
		info.Group = *j.GroupKey
	}
	if err := json.Unmarshal(j.Errors, &info.Errors); err != nil {
		return nil, fmt.Errorf("get job %d: error history: %w", id, err)
	}
	return info, nil
}

// CancelJob cancels a job that has not started yet, or a failed job that
// blocks its group (the group then moves on). It reports whether it did: a
// running or finished job is not cancelled.
func CancelJob(ctx context.Context, db DB, id JobID) (bool, error) {
	ok, err := gen.New(db).CancelJob(ctx, int64(id))
	if err != nil {
		return false, fmt.Errorf("cancel job %d: %w", id, err)
	}
	return ok, nil
}

// RetryJob puts a failed or cancelled job back in line with a fresh set of
// attempts, keeping its error history. It reports whether it did.
func RetryJob(ctx context.Context, db DB, id JobID) (bool, error) {
	ok, err := gen.New(db).RetryJob(ctx, int64(id))
	if err != nil {
		return false, fmt.Errorf("retry job %d: %w", id, err)
	}
	return ok, nil
}

// PauseQueue pauses a queue across every worker: from when it returns, no
// claim takes a job of the queue until ResumeQueue. Jobs already running
// finish; enqueueing goes on. The pause is stored in the database, so it
// holds for workers that start later too. It reports whether the queue was
// running.
func PauseQueue(ctx context.Context, db DB, queue string) (bool, error) {
	if err := checkName("queue", queue, MaxQueueBytes); err != nil || queue == "" {
		return false, fmt.Errorf("pause queue: %w", cmp.Or(err, errors.New("queue name is empty")))
	}
	paused, err := gen.New(db).PauseQueue(ctx, queue)
	if err != nil {
		return false, fmt.Errorf("pause queue %s: %w", queue, err)
	}
	return paused, nil
}

// ResumeQueue resumes a paused queue and wakes its workers. It reports
// whether the queue was paused.
func ResumeQueue(ctx context.Context, db DB, queue string) (bool, error) {
	resumed, err := gen.New(db).ResumeQueue(ctx, queue)
	if err != nil {
		return false, fmt.Errorf("resume queue %s: %w", queue, err)
	}
	return resumed, nil
}

// PausedQueue is a queue that is paused, and since when.
type PausedQueue struct {
	Queue    string
	PausedAt time.Time
}

// PausedQueues lists the paused queues.
func PausedQueues(ctx context.Context, db DB) ([]PausedQueue, error) {
	rows, err := gen.New(db).PausedQueues(ctx)
	if err != nil {
		return nil, fmt.Errorf("list paused queues: %w", err)
	}
	out := make([]PausedQueue, len(rows))
	for i, r := range rows {
		out[i] = PausedQueue{Queue: r.Queue, PausedAt: r.PausedAt}
	}
	return out, nil
}
