package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgtask/pgtask/gen"
)

// DB runs queries: *pgxpool.Pool, *pgx.Conn and pgx.Tx all satisfy it. Pass a
// pgx.Tx to enqueue inside your own transaction: the job exists if and only if
// that transaction commits.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// JobID identifies a job.
type JobID int64

const (
	// DefaultQueue is the queue of tasks that name none.
	DefaultQueue = "default"
	// DefaultMaxAttempts is the attempt limit of tasks that set none.
	DefaultMaxAttempts = 20
	// MaxPayloadBytes bounds one job's JSON payload. Large data belongs in a
	// table of its own, with its key in the payload.
	MaxPayloadBytes = 8 << 20
)

// EnqueueOptions are a job's settings. Generated Enqueue functions fill them
// from the task's tag; EnqueueOption values passed by the caller override them.
type EnqueueOptions struct {
	Queue       string // default DefaultQueue
	Group       string // FIFO group key; empty means the job is not grouped
	Priority    int16  // lower runs first among runnable jobs of a queue; default 0
	MaxAttempts int    // default DefaultMaxAttempts
	// RunAt, when set, is the earliest time the job may start (the database's
	// clock decides). Delay is the same relative to the database's now().
	// Set one or neither.
	RunAt time.Time
	Delay time.Duration
	// FailBlocksGroup makes a final failure stop the group until the job is
	// retried or cancelled. By default the group moves on to its next job.
	FailBlocksGroup bool
}

// EnqueueOption changes one setting of a job being enqueued.
type EnqueueOption func(*EnqueueOptions)

// WithQueue puts the job on queue q.
func WithQueue(q string) EnqueueOption { return func(o *EnqueueOptions) { o.Queue = q } }

// WithGroup sets the job's FIFO group key.
func WithGroup(key string) EnqueueOption { return func(o *EnqueueOptions) { o.Group = key } }

// WithPriority sets the job's priority; lower runs first.
func WithPriority(p int16) EnqueueOption { return func(o *EnqueueOptions) { o.Priority = p } }

// WithMaxAttempts sets how many attempts the job gets.
func WithMaxAttempts(n int) EnqueueOption { return func(o *EnqueueOptions) { o.MaxAttempts = n } }

// WithRunAt schedules the job for t.
func WithRunAt(t time.Time) EnqueueOption { return func(o *EnqueueOptions) { o.RunAt = t } }

// WithDelay schedules the job d after the database's current time.
func WithDelay(d time.Duration) EnqueueOption { return func(o *EnqueueOptions) { o.Delay = d } }

// WithFailBlocksGroup sets what a final failure does to the job's group.
func WithFailBlocksGroup(block bool) EnqueueOption {
	return func(o *EnqueueOptions) { o.FailBlocksGroup = block }
}

// EnqueueRequest is one job to insert.
type EnqueueRequest struct {
	Kind    string
	Payload json.RawMessage // a JSON object or array
	EnqueueOptions
}

// Apply applies opts to the request's options, in order.
func (r *EnqueueRequest) Apply(opts ...EnqueueOption) {
	for _, opt := range opts {
		if opt != nil {
			opt(&r.EnqueueOptions)
		}
	}
}

// Enqueue inserts one job.
func Enqueue(ctx context.Context, db DB, req EnqueueRequest) (JobID, error) {
	ids, err := EnqueueMany(ctx, db, []EnqueueRequest{req})
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// EnqueueMany inserts jobs in one statement and returns their ids in the order
// of reqs. Either every job is inserted or none: a request that fails its
// checks stops the whole batch with an *EnqueueError before anything is sent.
// Jobs of one group in a batch run in slice order.
func EnqueueMany(ctx context.Context, db DB, reqs []EnqueueRequest) ([]JobID, error) {
	if len(reqs) == 0 {
		return []JobID{}, nil
	}
	p := gen.InsertJobsParams{
		Payloads: make([]json.RawMessage, len(reqs)),
		Settings: make([]int32, len(reqs)),
		Groups:   make([]int32, len(reqs)),
		// Filled below: one entry per distinct set of settings or group.
		Kinds: []string{}, Queues: []string{}, Priorities: []int16{}, MaxAttempts: []int32{},
		FailBlocksGroup: []bool{}, RunAt: []string{}, DelayUs: []int64{},
		GroupQueues: []string{}, GroupKeys: []string{},
	}
	// Jobs name their settings and group by position (1-based; group 0 is
	// none), so a batch sends each only once.
	var (
		settings map[jobSettings]int32
		groups   map[groupRef]int32
		last     jobSettings
	)
	for i := range reqs {
		r := reqs[i]
		if err := r.check(); err != nil {
			return nil, &EnqueueError{Index: i, Kind: r.Kind, Err: err, batch: len(reqs) > 1}
		}
		js := jobSettings{kind: r.Kind, queue: r.Queue, priority: r.Priority, maxAttempts: int32(r.MaxAttempts),
			failBlocksGroup: r.FailBlocksGroup, delayUs: r.Delay.Microseconds()}
		if !r.RunAt.IsZero() {
			js.runAt = r.RunAt.Format(time.RFC3339Nano)
		}
		var o int32
		if i > 0 && js == last {
			o = p.Settings[i-1] // the common case: the same settings as the job before
		} else {
			if settings == nil {
				settings = make(map[jobSettings]int32)
			}
			var seen bool
			if o, seen = settings[js]; !seen {
				p.Kinds = append(p.Kinds, js.kind)
				p.Queues = append(p.Queues, js.queue)
				p.Priorities = append(p.Priorities, js.priority)
				p.MaxAttempts = append(p.MaxAttempts, js.maxAttempts)
				p.FailBlocksGroup = append(p.FailBlocksGroup, js.failBlocksGroup)
				p.RunAt = append(p.RunAt, js.runAt)
				p.DelayUs = append(p.DelayUs, js.delayUs)
				o = int32(len(p.Kinds))
				settings[js] = o
			}
			last = js
		}
		p.Settings[i] = o
		if r.Group != "" {
			ref := groupRef{r.Queue, r.Group}
			g, ok := groups[ref]
			if !ok {
				if groups == nil {
					groups = make(map[groupRef]int32)
				}
				p.GroupQueues = append(p.GroupQueues, r.Queue)
				p.GroupKeys = append(p.GroupKeys, r.Group)
				g = int32(len(p.GroupKeys))
				groups[ref] = g
			}
			p.Groups[i] = g
		}
		p.Payloads[i] = r.Payload
	}
	ids, err := gen.New(db).InsertJobs(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("enqueue %d job(s): %w", len(reqs), err)
	}
	if len(ids) != len(reqs) {
		return nil, fmt.Errorf("enqueue: inserted %d jobs for %d requests", len(ids), len(reqs))
	}
	out := make([]JobID, len(ids))
	for i, id := range ids {
		out[i] = JobID(id)
	}
	return out, nil
}

// groupRef names a group: its queue and key.
type groupRef struct{ queue, key string }

// jobSettings is what enqueue_jobs takes per distinct set of settings.
type jobSettings struct {
	kind, queue     string
	priority        int16
	maxAttempts     int32
	failBlocksGroup bool
	runAt           string
	delayUs         int64
}

// check fills defaults and refuses what the database would refuse, with a
// message that names the setting.
func (r *EnqueueRequest) check() error {
	if r.Kind == "" {
		return errors.New("kind is empty")
	}
	if r.Queue == "" {
		r.Queue = DefaultQueue
	}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
	if r.MaxAttempts < 1 || r.MaxAttempts > math.MaxInt32 {
		return fmt.Errorf("max attempts %d is out of range [1, %d]", r.MaxAttempts, math.MaxInt32)
	}
	if r.Delay < 0 {
		return fmt.Errorf("delay %s is negative", r.Delay)
	}
	if r.Delay != 0 && !r.RunAt.IsZero() {
		return errors.New("set RunAt or Delay, not both")
	}
	if len(r.Payload) == 0 {
		return errors.New("payload is empty")
	}
	if len(r.Payload) > MaxPayloadBytes {
		return fmt.Errorf("payload is %d bytes, more than the %d allowed", len(r.Payload), MaxPayloadBytes)
	}
	if !json.Valid(r.Payload) {
		return errors.New("payload is not valid JSON")
	}
	if bytes.Contains(r.Payload, []byte(`\u0000`)) {
		return errors.New(`payload contains \u0000, which PostgreSQL's jsonb cannot store`)
	}
	switch firstByte(r.Payload) {
	case '{', '[':
	default:
		return errors.New("payload must be a JSON object or array")
	}
	return nil
}

func firstByte(b []byte) byte {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c
	}
	return 0
}
