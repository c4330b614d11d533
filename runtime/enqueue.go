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
	"unicode/utf8"

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
	// MaxResultBytes bounds the JSON of one job's result (Job.SetResult).
	MaxResultBytes = 8 << 20
	// MaxQueueBytes, MaxKindBytes and MaxGroupKeyBytes bound a queue name,
	// a kind and a group key, in bytes of UTF-8. They enter the claim and
	// group indexes, whose rows PostgreSQL limits to about 2.7 kB; the
	// schema refuses longer ones too.
	MaxQueueBytes    = 128
	MaxKindBytes     = 128
	MaxGroupKeyBytes = 1024
)

// EnqueueOptions are a job's settings. Generated Enqueue functions fill them
// from the task's tag; EnqueueOption values passed by the caller override them.
type EnqueueOptions struct {
	Queue    string // default DefaultQueue
	Group    string // FIFO group key; empty means the job is not grouped
	Priority int16  // lower runs first among runnable jobs of a queue; default 0
	// Aging is how long the job, once due and its group's head, waits for
	// each level its priority rises while it is queued, until it reaches 0:
	// a steady stream of better jobs cannot keep it waiting forever.
	// Default DefaultPriorityAging; StrictPriority (or any negative value)
	// keeps the priority as it is. A job at priority 0 or better never ages.
	Aging       time.Duration
	MaxAttempts int // default DefaultMaxAttempts
	// RunAt, when set, is the earliest time the job may start (the database's
	// clock decides). Delay is the same relative to the database's now().
	// Set one or neither.
	RunAt time.Time
	Delay time.Duration
	// FailBlocksGroup makes a final failure stop the group until the job is
	// retried or cancelled. By default the group moves on to its next job.
	FailBlocksGroup bool
	// UniqueKey makes the job unique among jobs of its kind with the same
	// key: while a job holds the key, enqueueing another one inserts
	// nothing and returns the holder's id (EnqueueResults also says it
	// existed). A job holds its key while it is unfinished, and in the
	// finished statuses UniqueStatuses lists. Empty: not unique.
	UniqueKey string
	// UniqueWindow, when set, scopes the key to the window of that length
	// the job is enqueued in (by the database's clock, in whole windows
	// since the Unix epoch): a job enqueued in the next window is a new
	// one. With a window, UniqueStatuses defaults to StatusSucceeded.
	UniqueWindow time.Duration
	// UniqueStatuses are the finished statuses in which a job still holds
	// its key (the unfinished ones always do).
	UniqueStatuses []Status
	// Limit, when above 0, caps how many jobs of the job's limit key run at
	// once across every worker: jobs of (Queue, LimitKey) beyond Limit wait,
	// without a worker polling for them, until a running one ends. An empty
	// LimitKey is the queue's own limit. The limit is the tasks'
	// declaration; an operator's SetLimit wins over it. A grouped job cannot
	// have one: a group is its own limit of 1.
	Limit    int
	LimitKey string
	// LimitStrategy says what becomes of a job due now that finds its
	// limit key at its limit: it waits (LimitQueue, the default), or it is
	// cancelled at once (LimitCancelNewest), or only the key's oldest
	// (LimitKeepOldest) or newest (LimitKeepNewest, a debounce) waiting
	// job is kept. See docs/limits.md.
	LimitStrategy LimitStrategy
	// Rate, when above 0, caps how many jobs of the job's rate key start
	// per RatePer across every worker: at most RateBurst at once (0: the
	// default, DefaultRateBurst), then Rate per RatePer (a token bucket;
	// see docs/rate-limits.md). Jobs of (Queue, RateKey) over the rate wait,
	// without spending an attempt and without a worker polling for them,
	// until their key has a token. An empty RateKey is the queue's own
	// rate; the tasks' generated code uses the kind's name when the task
	// has no rate key field. The rate is the tasks' declaration; an
	// operator's SetRate wins over it. A grouped or limited job cannot have
	// one.
	Rate      int
	RatePer   time.Duration
	RateBurst int
	RateKey   string
	// Metadata is stored with the job apart from its payload and given to
	// each attempt (Job.Metadata): a trace context, a tenant, a request id.
	// Keys are not empty; keys and values together are at most
	// MaxMetadataBytes.
	Metadata map[string]string
	// Fair makes the job's queue fair: its tenants take turns, so that one
	// tenant's flood cannot push another's jobs behind it (see
	// docs/fairness.md). Tenant is the job's tenant, at most MaxTenantBytes;
	// a job of a fair queue that names none is tenant "". A queue, once
	// fair, stays so for every job enqueued into it, whatever its options,
	// until SetFairQueue makes it plain, and then the next job that names a
	// tenant makes it fair again.
	Fair   bool
	Tenant string
}

// MaxTenantBytes bounds a tenant key (see EnqueueOptions.Tenant).
const MaxTenantBytes = 1024

// DefaultPriorityAging is how long a queued job waits for each level its
// priority rises, unless its options say otherwise (EnqueueOptions.Aging).
const DefaultPriorityAging = time.Second

// StrictPriority, as EnqueueOptions.Aging, keeps a job's priority as it is
// however long it waits.
const StrictPriority time.Duration = -1

// MaxMetadataBytes bounds the keys and values of a job's metadata, in all.
const MaxMetadataBytes = 16 << 10

// MaxUniqueKeyBytes bounds a unique key (see EnqueueOptions.UniqueKey).
const MaxUniqueKeyBytes = 1024

// EnqueueOption changes one setting of a job being enqueued.
type EnqueueOption func(*EnqueueOptions)

// WithQueue puts the job on queue q.
func WithQueue(q string) EnqueueOption { return func(o *EnqueueOptions) { o.Queue = q } }

// WithLimit caps at n the jobs of key that run at once across every worker
// (see EnqueueOptions.Limit); key "" is the queue's own limit.
func WithLimit(key string, n int) EnqueueOption {
	return func(o *EnqueueOptions) { o.LimitKey, o.Limit = key, n }
}

// WithRate lets at most n jobs of key start per period across every worker
// (see EnqueueOptions.Rate); key "" is the queue's own rate.
func WithRate(key string, n int, per time.Duration) EnqueueOption {
	return func(o *EnqueueOptions) { o.RateKey, o.Rate, o.RatePer = key, n, per }
}

// WithRateBurst sets how many jobs of the job's rate key may start at once
// (EnqueueOptions.RateBurst).
func WithRateBurst(n int) EnqueueOption {
	return func(o *EnqueueOptions) { o.RateBurst = n }
}

// DefaultRateBurst is the burst of a rate of n jobs per period that
// declares none: a tenth of a period's jobs, at least 1.
func DefaultRateBurst(n int) int { return max(1, n/10) }

// LimitStrategy is what becomes of a job that finds its limit key at its
// limit (EnqueueOptions.LimitStrategy).
type LimitStrategy string

const (
	// LimitQueue: the job waits for a slot.
	LimitQueue LimitStrategy = "queue"
	// LimitCancelNewest: the job is cancelled at once.
	LimitCancelNewest LimitStrategy = "cancel_newest"
	// LimitKeepOldest: the job waits if none of its key waits yet, and is
	// cancelled at once otherwise: the key keeps its oldest waiting job.
	LimitKeepOldest LimitStrategy = "keep_oldest"
	// LimitKeepNewest: the job waits, and the jobs of its key that waited
	// until now are cancelled: the key keeps its newest (a debounce).
	LimitKeepNewest LimitStrategy = "keep_newest"
)

// WithLimitStrategy sets what becomes of the job when its limit key is at
// its limit (EnqueueOptions.LimitStrategy).
func WithLimitStrategy(s LimitStrategy) EnqueueOption {
	return func(o *EnqueueOptions) { o.LimitStrategy = s }
}

// WithTenant makes the job tenant key's in its queue, and the queue fair
// (see EnqueueOptions.Fair).
func WithTenant(key string) EnqueueOption {
	return func(o *EnqueueOptions) { o.Fair, o.Tenant = true, key }
}

// WithGroup sets the job's FIFO group key.
func WithGroup(key string) EnqueueOption { return func(o *EnqueueOptions) { o.Group = key } }

// WithPriority sets the job's priority; lower runs first.
func WithPriority(p int16) EnqueueOption { return func(o *EnqueueOptions) { o.Priority = p } }

// WithAging sets how long the job waits for each level its priority rises
// (see EnqueueOptions.Aging); StrictPriority keeps its priority as it is.
func WithAging(d time.Duration) EnqueueOption { return func(o *EnqueueOptions) { o.Aging = d } }

// WithMaxAttempts sets how many attempts the job gets.
func WithMaxAttempts(n int) EnqueueOption { return func(o *EnqueueOptions) { o.MaxAttempts = n } }

// WithRunAt schedules the job for t.
func WithRunAt(t time.Time) EnqueueOption { return func(o *EnqueueOptions) { o.RunAt = t } }

// WithDelay schedules the job d after the database's current time.
func WithDelay(d time.Duration) EnqueueOption { return func(o *EnqueueOptions) { o.Delay = d } }

// WithUniqueKey makes the job unique by key among jobs of its kind (see
// EnqueueOptions.UniqueKey).
func WithUniqueKey(key string) EnqueueOption { return func(o *EnqueueOptions) { o.UniqueKey = key } }

// WithUniqueWindow scopes the job's unique key to windows of length d (see
// EnqueueOptions.UniqueWindow).
func WithUniqueWindow(d time.Duration) EnqueueOption {
	return func(o *EnqueueOptions) { o.UniqueWindow = d }
}

// WithUniqueStatuses sets the finished statuses in which the job still
// holds its unique key (see EnqueueOptions.UniqueStatuses).
func WithUniqueStatuses(statuses ...Status) EnqueueOption {
	return func(o *EnqueueOptions) { o.UniqueStatuses = statuses }
}

// WithMetadata sets key to value in the job's metadata (see
// EnqueueOptions.Metadata), leaving the map it was given unchanged.
func WithMetadata(key, value string) EnqueueOption {
	return func(o *EnqueueOptions) {
		m := maps.Clone(o.Metadata)
		if m == nil {
			m = make(map[string]string, 1)
		}
		m[key] = value
		o.Metadata = m
	}
}

// WithFailBlocksGroup sets what a final failure does to the job's group.
func WithFailBlocksGroup(block bool) EnqueueOption {
	return func(o *EnqueueOptions) { o.FailBlocksGroup = block }
}

// EnqueueRequest is one job to insert.
type EnqueueRequest struct {
	Kind    string
	Payload json.RawMessage // a JSON object or array
	EnqueueOptions

	metadata json.RawMessage // Metadata encoded, by check
	parked   bool            // a batch's callback, waiting for its batch (see EnqueueBatch)
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
// Jobs of one group in a batch run in slice order. A unique job whose key is
// held (see EnqueueOptions.UniqueKey) is not inserted: its id is the
// holder's.
func EnqueueMany(ctx context.Context, db DB, reqs []EnqueueRequest) ([]JobID, error) {
	res, err := EnqueueResults(ctx, db, reqs)
	if err != nil {
		return nil, err
	}
	out := make([]JobID, len(res))
	for i, r := range res {
		out[i] = r.ID
	}
	return out, nil
}

// EnqueueResult is what became of one request of EnqueueResults.
type EnqueueResult struct {
	ID JobID
	// Existed: the request was a unique job whose key another job held
	// (enqueued before, or earlier in the same batch); ID is that job's and
	// nothing was inserted for the request.
	Existed bool
}

// EnqueueResults is EnqueueMany, saying for each request whether a job
// existed already with its unique key. Enqueues of one key are serialised
// (the key is locked until the transaction ends), so of any number racing,
// one inserts and the others get its id; a unique index makes sure of it
// whatever the isolation level (at REPEATABLE READ or SERIALIZABLE a race
// can instead fail with a unique violation, to be retried).
func EnqueueResults(ctx context.Context, db DB, reqs []EnqueueRequest) ([]EnqueueResult, error) {
	if len(reqs) == 0 {
		return []EnqueueResult{}, nil
	}
	if len(reqs) == 1 {
		r := reqs[0]
		if err := runEnqueueHooks(ctx, &r); err != nil {
			return nil, &EnqueueError{Index: 0, Kind: r.Kind, Err: err}
		}
		if err := r.check(); err != nil {
			return nil, &EnqueueError{Index: 0, Kind: r.Kind, Err: err}
		}
		if r.plain() {
			return insertPlain(ctx, db, &r)
		}
		reqs = []EnqueueRequest{r}
	}
	b := newBatch(len(reqs))
	for i := range reqs {
		r := reqs[i]
		if len(reqs) > 1 {
			if err := runEnqueueHooks(ctx, &r); err != nil {
				return nil, &EnqueueError{Index: i, Kind: r.Kind, Err: err, Batch: true}
			}
			if err := r.check(); err != nil {
				return nil, &EnqueueError{Index: i, Kind: r.Kind, Err: err, Batch: true}
			}
		}
		b.add(&r)
	}
	row, err := gen.New(db).InsertJobs(ctx, b.p)
	ids, existed := row.Ids, row.Existed
	if err != nil {
		return nil, fmt.Errorf("enqueue %d job(s): %w", len(reqs), err)
	}
	if len(ids) != len(reqs) || len(existed) != len(reqs) {
		return nil, fmt.Errorf("enqueue: %d ids for %d requests", len(ids), len(reqs))
	}
	out := make([]EnqueueResult, len(reqs))
	for i, id := range ids {
		out[i] = EnqueueResult{ID: JobID(id), Existed: existed[i]}
	}
	return out, nil
}

// plain reports whether a checked request uses none of the features that
// only enqueue_jobs handles: a group, a unique key, metadata, a limit, a
// rate, a tenant, a batch.
func (r *EnqueueRequest) plain() bool {
	return r.Group == "" && r.UniqueKey == "" && r.metadata == nil && r.Limit == 0 && r.Rate == 0 &&
		!r.Fair && r.Tenant == "" && !r.parked
}

// insertPlain inserts one checked plain request with enqueue_job, a
// statement of its own arguments, not enqueue_jobs' arrays of them.
func insertPlain(ctx context.Context, db DB, r *EnqueueRequest) ([]EnqueueResult, error) {
	js := settingsOf(r)
	id, err := gen.New(db).InsertJob(ctx, gen.InsertJobParams{
		Payload: r.Payload, Kind: js.kind, Queue: js.queue, Priority: js.priority, AgingMs: js.agingMs,
		MaxAttempts: js.maxAttempts, FailBlocksGroup: js.failBlocksGroup, RunAt: js.runAt, DelayUs: js.delayUs,
	})
	if err != nil {
		return nil, fmt.Errorf("enqueue 1 job(s): %w", err)
	}
	return []EnqueueResult{{ID: JobID(id)}}, nil
}

// settingsOf returns a checked request's settings, but for its unique key's.
func settingsOf(r *EnqueueRequest) jobSettings {
	js := jobSettings{kind: r.Kind, queue: r.Queue, priority: r.Priority, agingMs: agingMs(r.Aging), maxAttempts: int32(r.MaxAttempts),
		failBlocksGroup: r.FailBlocksGroup, delayUs: r.Delay.Microseconds()}
	if !r.RunAt.IsZero() {
		js.runAt = r.RunAt.Format(time.RFC3339Nano)
	}
	if r.parked {
		// A batch's callback: scheduled for no time, until its batch
		// releases it (see pgtask.finish_batches).
		js.runAt = parkedAt
	}
	return js
}

// batch builds enqueue_jobs' arguments. Jobs name their settings and their
// group by position (1-based; group 0 is none), so a batch sends each
// distinct set of settings and each group once.
type batch struct {
	p        gen.InsertJobsParams
	settings map[jobSettings]int32
	groups   map[groupRef]int32
	limits   map[groupRef]int32
	rates    map[groupRef]int32
	tenants  map[groupRef]int32
	last     jobSettings
}

// jobSettings is what enqueue_jobs takes per distinct set of settings.
type jobSettings struct {
	kind, queue     string
	priority        int16
	agingMs         int32 // 0: the priority stays
	maxAttempts     int32
	failBlocksGroup bool
	runAt           string
	delayUs         int64
	// Unique jobs: the window in microseconds, and the statuses that hold
	// the key, comma-separated.
	uniqueWindowUs int64
	uniqueStatuses string
}

// groupRef names a group: its queue and key.
type groupRef struct{ queue, key string }

func newBatch(n int) *batch {
	return &batch{p: gen.InsertJobsParams{
		Payloads: make([]json.RawMessage, 0, n), Settings: make([]int32, 0, n), Groups: make([]int32, 0, n),
		Kinds: []string{}, Queues: []string{}, Priorities: []int16{}, AgingMs: []int32{}, MaxAttempts: []int32{},
		FailBlocksGroup: []bool{}, RunAt: []string{}, DelayUs: []int64{},
		GroupQueues: []string{}, GroupKeys: []string{}, UniqueWindowsUs: []int64{}, UniqueStatuses: []string{},
		LimitQueues: []string{}, LimitKeys: []string{}, LimitMax: []int32{}, LimitStrategies: []string{},
		RateQueues: []string{}, RateKeys: []string{}, RateN: []int32{}, RatePeriodUs: []int64{}, RateBurst: []int32{},
		FairQueues: []string{}, FairTenants: []string{},
	}}
}

// add appends a checked request.
func (b *batch) add(r *EnqueueRequest) {
	js := settingsOf(r)
	if r.UniqueKey != "" {
		js.uniqueWindowUs = r.UniqueWindow.Microseconds()
		js.uniqueStatuses = uniqueStatuses(r.UniqueWindow, r.UniqueStatuses)
		if b.p.UniqueKeys == nil {
			// The batch's first unique job: the jobs before it have no key.
			b.p.UniqueKeys = make([]string, len(b.p.Payloads), cap(b.p.Payloads))
		}
	}
	o := b.setting(js)
	var g int32
	if r.Group != "" {
		g = b.group(groupRef{r.Queue, r.Group})
	}
	if b.p.UniqueKeys != nil {
		b.p.UniqueKeys = append(b.p.UniqueKeys, r.UniqueKey)
	}
	if r.Limit > 0 && b.p.Limits == nil {
		// The batch's first limited job: the jobs before it have none.
		b.p.Limits = make([]int32, len(b.p.Payloads), cap(b.p.Payloads))
	}
	if b.p.Limits != nil {
		var l int32
		if r.Limit > 0 {
			l = b.limit(groupRef{r.Queue, r.LimitKey}, int32(r.Limit), r.LimitStrategy)
		}
		b.p.Limits = append(b.p.Limits, l)
	}
	if r.Rate > 0 && b.p.Rates == nil {
		// The batch's first rate-limited job: the jobs before it have none.
		b.p.Rates = make([]int32, len(b.p.Payloads), cap(b.p.Payloads))
	}
	if b.p.Rates != nil {
		var l int32
		if r.Rate > 0 {
			l = b.rate(groupRef{r.Queue, r.RateKey}, r)
		}
		b.p.Rates = append(b.p.Rates, l)
	}
	if (r.Fair || r.Tenant != "") && b.p.Fair == nil {
		// The batch's first job that names a tenant: the jobs before it name none.
		b.p.Fair = make([]int32, len(b.p.Payloads), cap(b.p.Payloads))
	}
	if b.p.Fair != nil {
		var t int32
		if r.Fair || r.Tenant != "" {
			t = b.tenant(groupRef{r.Queue, r.Tenant})
		}
		b.p.Fair = append(b.p.Fair, t)
	}
	if len(r.Metadata) > 0 && b.p.Metadata == nil {
		// The batch's first job with metadata: the jobs before it have none.
		b.p.Metadata = make([]json.RawMessage, len(b.p.Payloads), cap(b.p.Payloads))
	}
	if b.p.Metadata != nil {
		b.p.Metadata = append(b.p.Metadata, r.metadata)
	}
	b.p.Payloads = append(b.p.Payloads, r.Payload)
	b.p.Settings = append(b.p.Settings, o)
	b.p.Groups = append(b.p.Groups, g)
}

// setting returns the position of js, listing it if it is new.
func (b *batch) setting(js jobSettings) int32 {
	if n := len(b.p.Settings); n > 0 && js == b.last {
		return b.p.Settings[n-1] // the common case: the same as the job before
	}
	b.last = js
	if o, ok := b.settings[js]; ok {
		return o
	}
	if b.settings == nil {
		b.settings = make(map[jobSettings]int32)
	}
	b.p.Kinds = append(b.p.Kinds, js.kind)
	b.p.Queues = append(b.p.Queues, js.queue)
	b.p.Priorities = append(b.p.Priorities, js.priority)
	b.p.AgingMs = append(b.p.AgingMs, js.agingMs)
	b.p.MaxAttempts = append(b.p.MaxAttempts, js.maxAttempts)
	b.p.FailBlocksGroup = append(b.p.FailBlocksGroup, js.failBlocksGroup)
	b.p.RunAt = append(b.p.RunAt, js.runAt)
	b.p.DelayUs = append(b.p.DelayUs, js.delayUs)
	b.p.UniqueWindowsUs = append(b.p.UniqueWindowsUs, js.uniqueWindowUs)
	b.p.UniqueStatuses = append(b.p.UniqueStatuses, js.uniqueStatuses)
	o := int32(len(b.p.Kinds))
	b.settings[js] = o
	return o
}

// listed returns the position (from 1) of ref in the list that m indexes,
// listing it with add if it is new: add appends its entry to the list's
// arrays, so the list has as many entries as m.
func listed(m *map[groupRef]int32, ref groupRef, add func()) int32 {
	if pos, ok := (*m)[ref]; ok {
		return pos
	}
	if *m == nil {
		*m = make(map[groupRef]int32)
	}
	add()
	pos := int32(len(*m) + 1)
	(*m)[ref] = pos
	return pos
}

// group returns the position of ref, listing it if it is new.
func (b *batch) group(ref groupRef) int32 {
	return listed(&b.groups, ref, func() {
		b.p.GroupQueues = append(b.p.GroupQueues, ref.queue)
		b.p.GroupKeys = append(b.p.GroupKeys, ref.key)
	})
}

// limit returns the position of the limit of key ref, listing it with max
// and strategy if it is new. Jobs of one key in one batch that declare
// different limits or strategies list it with the first one's.
func (b *batch) limit(ref groupRef, max int32, strategy LimitStrategy) int32 {
	return listed(&b.limits, ref, func() {
		b.p.LimitQueues = append(b.p.LimitQueues, ref.queue)
		b.p.LimitKeys = append(b.p.LimitKeys, ref.key)
		b.p.LimitMax = append(b.p.LimitMax, max)
		b.p.LimitStrategies = append(b.p.LimitStrategies, string(cmp.Or(strategy, LimitQueue)))
	})
}

// rate returns the position of the rate of key ref, listing it with r's
// rate if it is new. Jobs of one key in one batch that declare different
// rates list it with the first one's.
func (b *batch) rate(ref groupRef, r *EnqueueRequest) int32 {
	return listed(&b.rates, ref, func() {
		b.p.RateQueues = append(b.p.RateQueues, ref.queue)
		b.p.RateKeys = append(b.p.RateKeys, ref.key)
		b.p.RateN = append(b.p.RateN, int32(r.Rate))
		b.p.RatePeriodUs = append(b.p.RatePeriodUs, r.RatePer.Microseconds())
		b.p.RateBurst = append(b.p.RateBurst, int32(cmp.Or(r.RateBurst, DefaultRateBurst(r.Rate))))
	})
}

// tenant returns the position of the tenant ref, listing it if it is new.
func (b *batch) tenant(ref groupRef) int32 {
	return listed(&b.tenants, ref, func() {
		b.p.FairQueues = append(b.p.FairQueues, ref.queue)
		b.p.FairTenants = append(b.p.FairTenants, ref.key)
	})
}

// limitStrategies are the LimitStrategy values.
var limitStrategies = []LimitStrategy{LimitQueue, LimitCancelNewest, LimitKeepOldest, LimitKeepNewest}

// check fills defaults and refuses what the database would refuse, with a
// message that names the setting.
func (r *EnqueueRequest) check() error {
	if r.Kind == "" {
		return errors.New("kind is empty")
	}
	if r.Queue == "" {
		r.Queue = DefaultQueue
	}
	if err := checkName("kind", r.Kind, MaxKindBytes); err != nil {
		return err
	}
	if err := checkName("queue", r.Queue, MaxQueueBytes); err != nil {
		return err
	}
	if r.Group != "" {
		if err := checkName("group key", r.Group, MaxGroupKeyBytes); err != nil {
			return err
		}
	}
	if r.Tenant != "" {
		if err := checkName("tenant", r.Tenant, MaxTenantBytes); err != nil {
			return err
		}
	}
	switch {
	case r.Limit < 0 || r.Limit > math.MaxInt32:
		return fmt.Errorf("limit %d is out of range [1, %d] (0: none)", r.Limit, math.MaxInt32)
	case r.Limit == 0 && r.LimitKey != "":
		return fmt.Errorf("limit key %q without a limit", r.LimitKey)
	case r.Limit == 0 && r.LimitStrategy != "":
		return fmt.Errorf("limit strategy %q without a limit", r.LimitStrategy)
	case r.LimitStrategy != "" && !slices.Contains(limitStrategies, r.LimitStrategy):
		return fmt.Errorf("limit strategy %q is not one of %v", r.LimitStrategy, limitStrategies)
	case r.Limit > 0 && r.Group != "":
		return errors.New("a grouped job cannot have a limit: its group runs one job at a time already")
	case r.Limit > 0 && r.LimitKey != "":
		if err := checkName("limit key", r.LimitKey, MaxGroupKeyBytes); err != nil {
			return err
		}
	}
	if err := r.checkRate(); err != nil {
		return err
	}
	if r.Aging == 0 {
		r.Aging = DefaultPriorityAging
	}
	if r.Aging > 0 && (r.Aging < time.Millisecond || r.Aging > math.MaxInt32*time.Millisecond) {
		return fmt.Errorf("priority aging %s is out of range [1ms, %s] (StrictPriority keeps the priority)", r.Aging, math.MaxInt32*time.Millisecond)
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
	if !r.RunAt.IsZero() && (r.RunAt.Year() < 1 || r.RunAt.Year() > 9999) {
		return fmt.Errorf("RunAt %s is outside the years 1 to 9999", r.RunAt.UTC())
	}
	if r.UniqueKey != "" {
		if err := checkName("unique key", r.UniqueKey, MaxUniqueKeyBytes); err != nil {
			return err
		}
		if r.UniqueWindow < 0 || (r.UniqueWindow > 0 && r.UniqueWindow < time.Microsecond) {
			return fmt.Errorf("unique window %s is negative or under a microsecond", r.UniqueWindow)
		}
		for _, st := range r.UniqueStatuses {
			if !slices.Contains(allStatuses, st) {
				return fmt.Errorf("unique status %q is not a status", st)
			}
		}
	} else if r.UniqueWindow != 0 || len(r.UniqueStatuses) > 0 {
		return errors.New("a unique window or statuses without a unique key")
	}
	if err := r.checkMetadata(); err != nil {
		return err
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
	if err := jsonbRefusal(r.Payload); err != nil {
		return fmt.Errorf("payload %w", err)
	}
	switch firstByte(r.Payload) {
	case '{', '[':
	default:
		return errors.New("payload must be a JSON object or array")
	}
	return nil
}

// checkMetadata refuses metadata the database cannot store, and encodes
// the rest.
func (r *EnqueueRequest) checkMetadata() error {
	r.metadata = nil
	if len(r.Metadata) == 0 {
		return nil
	}
	size := 0
	for k, v := range r.Metadata {
		if k == "" {
			return errors.New("a metadata key is empty")
		}
		size += len(k) + len(v)
		if size > MaxMetadataBytes {
			return fmt.Errorf("metadata is more than the %d bytes allowed", MaxMetadataBytes)
		}
		if err := checkName("metadata key", k, MaxMetadataBytes); err != nil {
			return err
		}
		if err := checkName(fmt.Sprintf("metadata value of %q", k), v, MaxMetadataBytes); err != nil {
			return err
		}
	}
	b, err := json.Marshal(r.Metadata)
	if err != nil {
		return fmt.Errorf("encode metadata: %w", err)
	}
	r.metadata = b
	return nil
}

// uniqueStatuses lists, comma-separated, the statuses in which a unique job
// holds its key: the unfinished ones, and the finished ones asked for (by
// default, with a window, succeeded).
func uniqueStatuses(window time.Duration, finished []Status) string {
	held := []Status{StatusScheduled, StatusQueued, StatusStarted}
	if len(finished) == 0 && window > 0 {
		finished = []Status{StatusSucceeded}
	}
	for _, s := range allStatuses {
		if slices.Contains(finished, s) && !slices.Contains(held, s) {
			held = append(held, s)
		}
	}
	parts := make([]string, len(held))
	for i, s := range held {
		parts[i] = string(s)
	}
	return strings.Join(parts, ",")
}

// checkName refuses a kind, queue name or group key that the database
// cannot store or index: too long, not UTF-8, or holding a NUL byte.
func checkName(what, s string, maxBytes int) error {
	switch {
	case len(s) > maxBytes:
		return fmt.Errorf("%s is %d bytes, more than the %d allowed", what, len(s), maxBytes)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s %q is not valid UTF-8", what, s)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s %q contains a NUL byte", what, s)
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

// agingMs is what enqueue_jobs takes for a checked Aging: milliseconds per
// level, 0 for a priority that stays.
func agingMs(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	return int32(d / time.Millisecond)
}

// checkRate refuses a rate the database would refuse, or one that cannot
// hold with the job's other settings.
func (r *EnqueueRequest) checkRate() error {
	switch {
	case r.Rate < 0 || r.Rate > math.MaxInt32:
		return fmt.Errorf("rate %d is out of range [1, %d] (0: none)", r.Rate, math.MaxInt32)
	case r.Rate == 0 && (r.RateKey != "" || r.RatePer != 0 || r.RateBurst != 0):
		return errors.New("rate key, period or burst without a rate")
	case r.Rate == 0:
		return nil
	case r.RatePer < time.Millisecond:
		return fmt.Errorf("rate period %s is below 1ms", r.RatePer)
	case r.RateBurst < 0 || r.RateBurst > math.MaxInt32:
		return fmt.Errorf("rate burst %d is out of range [1, %d] (0: the default)", r.RateBurst, math.MaxInt32)
	case r.Group != "":
		return errors.New("a grouped job cannot have a rate: its group runs one job at a time, in order")
	case r.Limit > 0:
		return errors.New("a job cannot have both a concurrency limit and a rate (see docs/rate-limits.md)")
	}
	return checkName("rate key", r.RateKey, MaxGroupKeyBytes)
}
