package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/gen"
)

// ErrJobFailed is what waiting for, or reading the result of, a job that
// failed for good or was cancelled wraps: errors.Is(err, ErrJobFailed).
// The error is a *JobFailedError, with the job's last error. A cancelled
// job's error is also errors.Is(err, ErrJobCancelled).
var ErrJobFailed = errors.New("pgtask: job did not succeed")

// JobFailedError reports a job that ended without succeeding.
type JobFailedError struct {
	ID     JobID
	Kind   string
	Status Status // StatusFailed or StatusCancelled
	// LastError is the error of the job's last attempt, as recorded; empty
	// when none was (a job cancelled before it ran).
	LastError string
}

func (e *JobFailedError) Error() string {
	if e.LastError == "" {
		return fmt.Sprintf("job %d (%s) %s", e.ID, e.Kind, e.Status)
	}
	return fmt.Sprintf("job %d (%s) %s: %s", e.ID, e.Kind, e.Status, e.LastError)
}

func (e *JobFailedError) Unwrap() error { return ErrJobFailed }

// Is makes a cancelled job's error match ErrJobCancelled too.
func (e *JobFailedError) Is(target error) bool {
	return target == ErrJobCancelled && e.Status == StatusCancelled
}

// JobResult is one job's typed result, as Get<T>Results returns them.
type JobResult[R any] struct {
	ID     JobID
	Status Status // empty when there is no such job
	// Value is the result when the job has succeeded, else the zero R.
	Value R
	// Err is nil when the job has succeeded. It wraps ErrNoResult while
	// the job has not finished, is a *JobFailedError (ErrJobFailed) when it
	// failed or was cancelled, and wraps ErrJobNotFound when there is no job.
	Err error
}

// DecodeResult reads a job's result into an R: its result when it has
// succeeded, a *JobFailedError when it failed or was cancelled, or an error
// wrapping ErrNoResult while it has not finished.
func DecodeResult[R any](info *JobInfo) (R, error) {
	var r R
	switch info.Status {
	case StatusSucceeded:
		if err := json.Unmarshal(info.Result, &r); err != nil {
			return r, fmt.Errorf("decode result of job %d: %w", info.ID, err)
		}
		return r, nil
	case StatusFailed, StatusCancelled:
		e := &JobFailedError{ID: info.ID, Kind: info.Kind, Status: info.Status}
		if n := len(info.Errors); n > 0 {
			e.LastError = info.Errors[n-1].Error
		}
		return r, e
	}
	return r, fmt.Errorf("job %d is %s: %w", info.ID, info.Status, ErrNoResult)
}

// GetJobs reads the jobs ids in one round trip. The result is in the order
// of ids, with nil for an id that has no job.
func GetJobs(ctx context.Context, db DB, ids []JobID) ([]*JobInfo, error) {
	rows, err := gen.New(db).GetJobs(ctx, jobIDs(ids))
	if err != nil {
		return nil, fmt.Errorf("get jobs: %w", err)
	}
	byID := make(map[JobID]*JobInfo, len(rows))
	for _, row := range rows {
		info, err := jobInfo(row)
		if err != nil {
			return nil, err
		}
		byID[info.ID] = info
	}
	out := make([]*JobInfo, len(ids))
	for i, id := range ids {
		out[i] = byID[id]
	}
	return out, nil
}

// waitPollInterval is how often a waiter looks without a notification:
// notifications are lost while the listening connection is down, and a job
// that ends other than through a worker's outcome (an operator's cancel, a
// crash's last attempt) sends none.
var waitPollInterval atomic.Int64 // a time.Duration

func init() { waitPollInterval.Store(int64(time.Second)) }

// WaitJobs waits until each of the jobs ids has finished (succeeded, failed
// or was cancelled) and returns them, in the order of ids. It returns
// early with ctx's error, or with an error wrapping ErrJobNotFound when an
// id has no job.
//
// Waiting needs a connection that LISTENs, which a transaction or a single
// connection cannot lend, hence the pool: all the waits of a process on one
// pool share one of its connections while any is waiting. Workers announce
// the finishes of jobs whose kind has a result (Registration.HasResult, set
// by generated handlers of TaskWithResult tasks), and the database every
// final failure and every cancel, so those wake their waiters at once; a
// success of another kind is seen within about a second, by polling, which
// also covers notifications lost while the connection is down.
func WaitJobs(ctx context.Context, pool *pgxpool.Pool, ids []JobID) ([]*JobInfo, error) {
	out := make([]*JobInfo, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	pending := make(map[JobID]bool, len(ids))
	for _, id := range ids {
		pending[id] = true
	}
	done := make(map[JobID]*JobInfo, len(ids))

	h := joinHub(pool)
	defer h.leave()
	w := &waiter{wake: make(chan struct{}, 1)}
	h.add(w, ids)
	defer h.remove(w, ids)
	// Listening first: a job that finishes after the first look below is
	// then announced to this waiter.
	select {
	case <-h.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	listening := h.done // nil once the listener is gone: polling here

	q := gen.New(pool)
	look := func(all bool) error {
		rest := make([]int64, 0, len(pending))
		for id := range pending {
			rest = append(rest, int64(id))
		}
		var rows []gen.PgtaskJob
		var err error
		if all {
			rows, err = q.GetJobs(ctx, rest)
		} else {
			rows, err = q.FinishedJobs(ctx, rest)
		}
		if err != nil {
			return fmt.Errorf("wait for jobs: %w", err)
		}
		seen := make(map[JobID]bool, len(rows))
		for _, row := range rows {
			seen[JobID(row.ID)] = true
			if !finished(Status(row.Status)) {
				continue
			}
			info, err := jobInfo(row)
			if err != nil {
				return err
			}
			done[info.ID] = info
			delete(pending, info.ID)
		}
		if all {
			for id := range pending {
				if !seen[id] {
					return fmt.Errorf("wait for job %d: %w", id, ErrJobNotFound)
				}
			}
		}
		return nil
	}
	all, need := true, true
	// The hub looks for every waiter at once while it listens; a waiter
	// polls for itself only once the hub's connection is gone.
	every := time.Duration(waitPollInterval.Load())
	var poll <-chan time.Time
	for {
		if need {
			if err := look(all); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, err
			}
		}
		if len(pending) == 0 {
			for i, id := range ids {
				out[i] = done[id]
			}
			return out, nil
		}
		all, need = false, true
		select {
		case <-w.wake:
			// The hub read the jobs it was told of; without them (it could
			// not), look here.
			if got := w.take(); len(got) > 0 {
				for _, info := range got {
					if pending[info.ID] {
						done[info.ID] = info
						delete(pending, info.ID)
					}
				}
				need = false
			}
		case <-poll:
			all = true // also finds jobs deleted meanwhile
			poll = time.After(every)
		case <-listening:
			listening = nil
			poll = time.After(0)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func finished(s Status) bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCancelled
}

func jobIDs(ids []JobID) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}

// finishHub is the connection of a pool that listens for announced
// finishes, shared by every WaitJobs on the pool while any is waiting.
type finishHub struct {
	pool  *pgxpool.Pool
	refs  int // guarded by hubs.mu
	stop  context.CancelFunc
	ready chan struct{} // closed once listening, or once that failed
	done  chan struct{} // closed when the listener has stopped

	kick chan struct{} // buffered: ids are queued for fetch

	mu      sync.Mutex
	waiters map[JobID]map[*waiter]bool
	queued  []JobID // announced, with waiters, not yet read
}

// waiter is one WaitJobs: the hub hands it the jobs it waits for that
// finished, and wakes it.
type waiter struct {
	wake chan struct{} // buffered: one pending wake-up at most

	mu  sync.Mutex
	got []*JobInfo
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

func (w *waiter) deliver(info *JobInfo) {
	w.mu.Lock()
	w.got = append(w.got, info)
	w.mu.Unlock()
	w.signal()
}

func (w *waiter) take() []*JobInfo {
	w.mu.Lock()
	defer w.mu.Unlock()
	got := w.got
	w.got = nil
	return got
}

var hubs struct {
	mu sync.Mutex
	m  map[*pgxpool.Pool]*finishHub
}

func joinHub(pool *pgxpool.Pool) *finishHub {
	hubs.mu.Lock()
	defer hubs.mu.Unlock()
	h := hubs.m[pool]
	if h == nil {
		ctx, stop := context.WithCancel(context.Background())
		h = &finishHub{pool: pool, stop: stop, ready: make(chan struct{}), done: make(chan struct{}),
			kick: make(chan struct{}, 1), waiters: map[JobID]map[*waiter]bool{}}
		if hubs.m == nil {
			hubs.m = map[*pgxpool.Pool]*finishHub{}
		}
		hubs.m[pool] = h
		go h.listen(ctx)
	}
	h.refs++
	return h
}

// leave stops the hub when its last waiter leaves.
func (h *finishHub) leave() {
	hubs.mu.Lock()
	defer hubs.mu.Unlock()
	h.refs--
	if h.refs == 0 {
		h.stop()
		if hubs.m[h.pool] == h {
			delete(hubs.m, h.pool)
		}
	}
}

// forget takes a hub whose listener failed out of use, so that the next
// waiter starts another.
func (h *finishHub) forget() {
	hubs.mu.Lock()
	defer hubs.mu.Unlock()
	if hubs.m[h.pool] == h {
		delete(hubs.m, h.pool)
	}
}

func (h *finishHub) add(w *waiter, ids []JobID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		if h.waiters[id] == nil {
			h.waiters[id] = map[*waiter]bool{}
		}
		h.waiters[id][w] = true
	}
}

func (h *finishHub) remove(w *waiter, ids []JobID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		delete(h.waiters[id], w)
		if len(h.waiters[id]) == 0 {
			delete(h.waiters, id)
		}
	}
}

// listen holds a connection of the pool LISTENing until ctx ends or the
// connection fails, and queues the ids each notification names for fetch.
// The connection is closed at the end rather than returned to the pool: it
// may be interrupted mid-wait.
func (h *finishHub) listen(ctx context.Context) {
	defer close(h.done)
	ready := sync.OnceFunc(func() { close(h.ready) })
	defer ready()
	defer h.forget()
	conn, err := h.pool.Acquire(ctx)
	if err != nil {
		return
	}
	pc := conn.Hijack()
	defer pc.Close(context.Background()) //nolint:errcheck // discarded either way
	if err := gen.New(pc).ListenFinished(ctx); err != nil {
		return
	}
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	go h.fetch(fctx)
	ready()
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			return
		}
		h.queue(n.Payload)
	}
}

// queue takes the ids of a notification that someone waits for.
func (h *finishHub) queue(payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.queued)
	for _, s := range strings.Split(payload, ",") {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			continue // not pgtask's
		}
		if len(h.waiters[JobID(id)]) > 0 {
			h.queued = append(h.queued, JobID(id))
		}
	}
	if len(h.queued) > n {
		select {
		case h.kick <- struct{}{}:
		default:
		}
	}
}

// fetch reads the queued jobs that have finished, all those queued
// meanwhile in one statement, and hands each to its waiters: a thousand
// waiters woken together cost a statement or two, not a thousand. A job
// not finished (a forged notification) wakes nobody. When the read fails,
// the jobs' waiters are woken to look for themselves. Every poll interval
// it reads all the jobs waited for, in one statement: a job that ends
// without an announcement (a success of a kind without a result, or one
// whose notification was lost) is found so, however many wait.
func (h *finishHub) fetch(ctx context.Context) {
	q := gen.New(h.pool)
	tick := time.NewTicker(time.Duration(waitPollInterval.Load()))
	defer tick.Stop()
	for {
		var all bool
		select {
		case <-ctx.Done():
			return
		case <-h.kick:
		case <-tick.C:
			all = true
		}
		h.mu.Lock()
		ids := h.queued
		h.queued = nil
		if all {
			ids = ids[:0]
			for id := range h.waiters {
				ids = append(ids, id)
			}
		}
		h.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		rows, err := q.FinishedJobs(ctx, jobIDs(ids))
		h.mu.Lock()
		if err != nil {
			for _, id := range ids {
				for w := range h.waiters[id] {
					w.signal()
				}
			}
		}
		for _, row := range rows {
			info, err := jobInfo(row)
			for w := range h.waiters[JobID(row.ID)] {
				if err != nil {
					w.signal()
				} else {
					w.deliver(info)
				}
			}
		}
		h.mu.Unlock()
	}
}
