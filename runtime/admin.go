package runtime

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
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

// AttemptError is one failed attempt in a job's history, or, with
// OperatorRetry, an operator's retry (RetryJob): Attempt is then how many
// attempts the job had made, At when it was retried, and the attempts after
// it count from 1 again.
type AttemptError struct {
	Attempt       int       `json:"attempt"`
	Error         string    `json:"error"`
	At            time.Time `json:"at"`
	Panic         bool      `json:"panic,omitempty"`
	Stack         string    `json:"stack,omitempty"`
	OperatorRetry bool      `json:"operator_retry,omitempty"`
}

// JobInfo is a job as stored.
type JobInfo struct {
	ID       JobID
	Kind     string
	Queue    string
	Group    string
	Status   Status
	Priority int16 // as reached by priority aging
	// Aging is how long the job waits for each level its priority rises
	// (EnqueueOptions.Aging), StrictPriority when it keeps its priority.
	// AgesAt is when its priority next rises, should it be queued then;
	// nil when it never will (priority 0 or better, or StrictPriority).
	Aging       time.Duration
	AgesAt      *time.Time
	Attempts    int
	MaxAttempts int
	// Snoozes counts the job's snoozes (see Snooze), which spend no
	// attempt.
	Snoozes    int
	Payload    json.RawMessage
	Result     json.RawMessage // set when the job succeeded with a result
	Errors     []AttemptError
	RunAfter   time.Time
	CreatedAt  time.Time
	StartedAt  *time.Time
	FinishedAt *time.Time
	// UniqueKey is a unique job's key as stored: its kind, its key and,
	// with a window, the window's number.
	UniqueKey string
	// Metadata is what the job was enqueued with; nil for none.
	Metadata map[string]string
	// BatchID is the batch the job belongs to (see EnqueueBatch); 0 for
	// none. A batch's callbacks are not its jobs: they have none.
	BatchID BatchID
	// WorkflowID is the workflow the job is a step of (see Workflow); 0
	// for none. Its parents are in JobParents.
	WorkflowID WorkflowID
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
	return jobInfo(j)
}

// jobInfo decodes a job's row.
func jobInfo(j gen.PgtaskJob) (*JobInfo, error) {
	info := &JobInfo{
		ID: JobID(j.ID), Kind: j.Kind, Queue: j.Queue, Status: Status(j.Status), Priority: j.Priority,
		Attempts: int(j.Attempts), MaxAttempts: int(j.MaxAttempts), Snoozes: int(j.Snoozes), Payload: j.Payload, Result: j.Result,
		RunAfter: j.RunAfter, CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt,
		Aging: StrictPriority, AgesAt: j.AgeDue,
	}
	if j.AgingMs > 0 {
		info.Aging = time.Duration(j.AgingMs) * time.Millisecond
	}
	if j.GroupKey != nil {
		info.Group = *j.GroupKey
	}
	if j.UniqueKey != nil {
		info.UniqueKey = *j.UniqueKey
	}
	info.Metadata = decodeMetadata(j.Metadata)
	if j.WorkflowID.Valid {
		info.WorkflowID = WorkflowID(j.WorkflowID.Int64)
	}
	if j.BatchID.Valid {
		info.BatchID = BatchID(j.BatchID.Int64)
	}
	if err := json.Unmarshal(j.Errors, &info.Errors); err != nil {
		return nil, fmt.Errorf("get job %d: error history: %w", j.ID, err)
	}
	return info, nil
}

// CancelJob cancels a job that has not started yet, or a failed job that
// blocks its group (the group then moves on). For a running job it asks the
// worker running it, wherever that is, to cancel the attempt: the
// handler's context is cancelled at once (context.Cause gives
// ErrJobCancelled), and when the handler returns an error, or the worker
// is lost, the job ends cancelled instead of being retried; a handler that
// completes its work anyway succeeds. It reports whether it cancelled the
// job or asked for its cancellation: a finished job is not cancelled.
func CancelJob(ctx context.Context, db DB, id JobID) (bool, error) {
	ok, err := gen.New(db).CancelJob(ctx, int64(id))
	if err != nil {
		return false, fmt.Errorf("cancel job %d: %w", id, err)
	}
	return ok, nil
}

// RetryJob puts a failed or cancelled job back in line with a fresh set of
// attempts, keeping its error history, where the retry is marked (see
// AttemptError.OperatorRetry). It reports whether it did. A unique
// job whose key another job holds now (one enqueued with the key after this
// one finished and freed it) is left as it is, with a *RetryConflict error.
func RetryJob(ctx context.Context, db DB, id JobID) (bool, error) {
	r, err := gen.New(db).RetryJob(ctx, int64(id))
	if err != nil {
		return false, fmt.Errorf("retry job %d: %w", id, err)
	}
	if r.HeldBy != 0 {
		return false, &RetryConflict{Job: id, HeldBy: JobID(r.HeldBy)}
	}
	return r.Retried, nil
}

// RetryConflict is a job a retry left alone because another job holds its
// unique key now: one enqueued with the key after the job finished and
// freed it. Retrying it would make two jobs hold one key; the holder, or
// its key, has to go first.
type RetryConflict struct {
	Job    JobID // the job not retried
	HeldBy JobID // the job that holds its unique key
}

func (c *RetryConflict) Error() string {
	return fmt.Sprintf("retry job %d: job %d holds its unique key now", c.Job, c.HeldBy)
}

// RetryConflictsError is the error RetryJobs returns, beside how many jobs it
// retried, when unique keys that other jobs hold now kept some of the jobs
// from being retried (see RetryConflict). Every other job was retried.
type RetryConflictsError struct {
	Retried   int
	Conflicts []RetryConflict
}

func (e *RetryConflictsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "retry jobs: retried %d; %d not retried, their unique keys held by other jobs now:", e.Retried, len(e.Conflicts))
	const shown = 10
	for i, c := range e.Conflicts[:min(len(e.Conflicts), shown)] {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " job %d (held by job %d)", c.Job, c.HeldBy)
	}
	if len(e.Conflicts) > shown {
		fmt.Fprintf(&b, " and %d more", len(e.Conflicts)-shown)
	}
	return b.String()
}

// PauseQueue pauses a queue across every worker: from when it returns, no
// claim takes a job of the queue until ResumeQueue. Jobs already claimed
// run: those running finish, and a held-mode batch's jobs still waiting in
// it run too (a batch is sized to run within its commit budget, but holds
// up to QueueConfig.BatchSize jobs); enqueueing goes on. The pause is stored in the database, so it
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

// JobFilter selects jobs for the bulk operations. A zero field matches
// every job.
type JobFilter struct {
	Queue    string
	Kind     string
	Group    string
	Statuses []Status
	// CreatedAfter and CreatedBefore bound when the job was enqueued:
	// from CreatedAfter, up to before CreatedBefore.
	CreatedAfter, CreatedBefore time.Time
}

// page is the query for the page of f's jobs after after, at most max.
func (f JobFilter) page(after int64, max int32) gen.ListJobsPageParams {
	opt := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	p := gen.ListJobsPageParams{Queue: opt(f.Queue), Kind: opt(f.Kind), GroupKey: opt(f.Group), AfterID: after, Max: max}
	for _, st := range f.Statuses {
		p.Statuses = append(p.Statuses, string(st))
	}
	if !f.CreatedAfter.IsZero() {
		p.CreatedAfter = &f.CreatedAfter
	}
	if !f.CreatedBefore.IsZero() {
		p.CreatedBefore = &f.CreatedBefore
	}
	return p
}

func (f JobFilter) check() error {
	for _, st := range f.Statuses {
		if !slices.Contains(allStatuses, st) {
			return fmt.Errorf("status %q is none of %v", st, allStatuses)
		}
	}
	return nil
}

// ListJobs returns up to limit jobs f matches with ids above after, in id
// order: pass the last one's id to get the next page.
func ListJobs(ctx context.Context, db DB, f JobFilter, after JobID, limit int) ([]*JobInfo, error) {
	if err := f.check(); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	rows, err := gen.New(db).ListJobsPage(ctx, f.page(int64(after), int32(min(max(limit, 0), math.MaxInt32))))
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	out := make([]*JobInfo, len(rows))
	for i, r := range rows {
		if out[i], err = jobInfo(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CountJobs counts the jobs f matches.
func CountJobs(ctx context.Context, db DB, f JobFilter) (int64, error) {
	if err := f.check(); err != nil {
		return 0, fmt.Errorf("count jobs: %w", err)
	}
	p := f.page(0, 0)
	n, err := gen.New(db).CountJobsWhere(ctx, gen.CountJobsWhereParams{
		Queue: p.Queue, Kind: p.Kind, GroupKey: p.GroupKey, Statuses: p.Statuses, CreatedAfter: p.CreatedAfter, CreatedBefore: p.CreatedBefore,
	})
	if err != nil {
		return 0, fmt.Errorf("count jobs: %w", err)
	}
	return n, nil
}

// bulkBatch is how many jobs a bulk operation changes per statement.
const bulkBatch = 1000

// Progress, when not nil, is told after each batch of a bulk operation how
// many jobs it has looked at and changed so far.
type Progress func(seen, changed int)

// CancelJobs cancels the jobs f matches as CancelJob does (running jobs
// too, unless f leaves them out by status), in batches of 1,000
// jobs in id order, each batch a transaction of its own when db is a pool.
// It returns how many it cancelled.
func CancelJobs(ctx context.Context, db DB, f JobFilter, progress Progress) (int, error) {
	return bulk(ctx, db, f, progress, "cancel", gen.New(db).CancelJobs)
}

// RetryJobs retries the failed and cancelled jobs f matches, as RetryJob
// does, in batches like CancelJobs. It returns how many it retried. Jobs
// whose unique key another job holds now are left as they are, and the
// others retried; then the error is a *RetryConflictsError that lists them.
func RetryJobs(ctx context.Context, db DB, f JobFilter, progress Progress) (int, error) {
	q := gen.New(db)
	var conflicts []RetryConflict
	n, err := bulk(ctx, db, f, progress, "retry", func(ctx context.Context, ids []int64) (int32, error) {
		r, err := q.RetryJobs(ctx, ids)
		if err != nil {
			return 0, err
		}
		for i, id := range r.NotRetried {
			conflicts = append(conflicts, RetryConflict{Job: JobID(id), HeldBy: JobID(r.HeldBy[i])})
		}
		return r.Changed, nil
	})
	if len(conflicts) > 0 {
		err = errors.Join(err, &RetryConflictsError{Retried: n, Conflicts: conflicts})
	}
	return n, err
}

// DeleteJobs deletes the finished jobs f matches, but not one still at the
// head of its group (a failure that blocks it, or a head whose group has
// yet to move on): retention's rule. It returns how many it deleted.
func DeleteJobs(ctx context.Context, db DB, f JobFilter, progress Progress) (int, error) {
	return bulk(ctx, db, f, progress, "delete", gen.New(db).DeleteJobs)
}

func bulk(ctx context.Context, db DB, f JobFilter, progress Progress, what string, apply func(context.Context, []int64) (int32, error)) (int, error) {
	if err := f.check(); err != nil {
		return 0, fmt.Errorf("%s jobs: %w", what, err)
	}
	q := gen.New(db)
	var after int64
	seen, changed := 0, 0
	for {
		rows, err := q.ListJobsPage(ctx, f.page(after, bulkBatch))
		if err != nil {
			return changed, fmt.Errorf("%s jobs: %w", what, err)
		}
		if len(rows) == 0 {
			return changed, nil
		}
		ids := make([]int64, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		n, err := apply(ctx, ids)
		if err != nil {
			return changed, fmt.Errorf("%s jobs %d to %d: %w", what, ids[0], ids[len(ids)-1], err)
		}
		seen, changed, after = seen+len(ids), changed+int(n), ids[len(ids)-1]
		if progress != nil {
			progress(seen, changed)
		}
		if len(rows) < bulkBatch {
			return changed, nil
		}
	}
}

// QueueStats is what Stats says of a queue.
type QueueStats struct {
	Queue  string
	Counts map[Status]int64
	// OldestWait is how long the queue's oldest runnable job has waited
	// since it could run; 0 with none.
	OldestWait time.Duration
	// BlockedGroups is how many of its groups a failure blocks.
	BlockedGroups int64
	Paused        bool
	// Of the queued jobs (Counts[StatusQueued]): Runnable wait for a
	// worker (ungrouped, a group's head, or admitted by their concurrency
	// limit), WaitingOnLimit for a free slot of their concurrency limit
	// (see EnqueueOptions.Limit), WaitingOnRate for a token of their rate
	// limit (see EnqueueOptions.Rate); the rest wait behind their group's
	// head.
	Runnable       int64
	WaitingOnLimit int64
	WaitingOnRate  int64
}

// Stats reports, per queue with jobs (or paused), its jobs by status, its
// oldest wait, its blocked groups, whether it is paused, and how many of
// its queued jobs wait for a worker, on a concurrency limit and on a rate. It counts every
// job, so its cost grows with the table (which retention bounds).
func Stats(ctx context.Context, db DB) ([]QueueStats, error) {
	q := gen.New(db)
	counts, err := q.QueueCounts(ctx)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	paused, err := PausedQueues(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	byQueue := map[string]*QueueStats{}
	get := func(name string) *QueueStats {
		if s, ok := byQueue[name]; ok {
			return s
		}
		s := &QueueStats{Queue: name, Counts: map[Status]int64{}}
		byQueue[name] = s
		return s
	}
	for _, c := range counts {
		get(c.Queue).Counts[Status(c.Status)] = c.Jobs
	}
	for _, p := range paused {
		get(p.Queue).Paused = true
	}
	names := slices.Sorted(maps.Keys(byQueue))
	waits, err := q.QueueWaits(ctx, names)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	out := make([]QueueStats, len(names))
	for i, w := range waits {
		s := byQueue[w.Queue]
		s.OldestWait = time.Duration(w.OldestWaitSeconds * float64(time.Second))
		s.BlockedGroups = w.BlockedGroups
		s.Runnable, s.WaitingOnLimit, s.WaitingOnRate = w.Runnable, w.WaitingOnLimit, w.WaitingOnRate
		out[i] = *s
	}
	return out, nil
}
