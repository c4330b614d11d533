package runtime_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// A queued job's priority rises one level per aging interval it waits,
// caught up all at once, never past 0; jobs at 0 or better and jobs with
// strict priority keep theirs.
func TestPriorityAgesByTheIntervalsWaitedDownToZero(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	start := time.Now()
	aged := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithPriority(5), runtime.WithAging(20*time.Millisecond))
	strict := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithPriority(5), runtime.WithAging(runtime.StrictPriority))
	urgent := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithPriority(-3), runtime.WithAging(20*time.Millisecond))
	later := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithPriority(5), runtime.WithAging(time.Hour))

	time.Sleep(70 * time.Millisecond)
	r, err := b.gen.AgePriorities(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	waited := time.Since(start)
	if r.Aged != 1 || len(r.Skipped) != 0 {
		t.Fatalf("aged %d, skipped %v; want the one due job aged", r.Aged, r.Skipped)
	}
	// It waited at least 70 ms: its first level after 20 ms, then one per
	// 20 ms, so 3 levels or more; and at most what the test waited allows.
	j := b.job(t, aged)
	if lo, hi := max(0, 5-1-int((waited-20*time.Millisecond)/(20*time.Millisecond))), 2; int(j.Priority) < lo || int(j.Priority) > hi {
		t.Errorf("after at most %s the aged job has priority %d, want %d to %d", waited, j.Priority, lo, hi)
	}
	for id, want := range map[runtime.JobID]int16{strict: 5, urgent: -3, later: 5} {
		if j := b.job(t, id); j.Priority != want {
			t.Errorf("job %d has priority %d, want %d", id, j.Priority, want)
		}
	}
	time.Sleep(120 * time.Millisecond)
	if _, err := b.gen.AgePriorities(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if j := b.job(t, aged); j.Priority != 0 || j.AgeDue != nil {
		t.Errorf("after 190 ms the aged job has priority %d and age_due %v, want 0 and none", j.Priority, j.AgeDue)
	}
	// Nothing is due now: a round changes nothing.
	if r, err := b.gen.AgePriorities(ctx, 100); err != nil || r.Aged != 0 {
		t.Errorf("a round with nothing due aged %d, %v", r.Aged, err)
	}
}

// A job behind an endless stream of priority-0 jobs that keeps every
// runner busy: one of priority 10 that ages, and one delayed, whose
// promotion puts it behind the claims' cursor (its id is older than the
// stream's). Both start while the stream goes on, in both modes; one of
// priority 10 with strict priority waits for the stream's end.
func TestJobsBehindTheCursorStartWhileABetterStreamGoesOn(t *testing.T) {
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			const backlog = 30
			streamFor := 4 * time.Second
			var (
				mu         sync.Mutex
				streamEnd  time.Time // when the last stream job started
				started    = map[string]time.Time{}
				streamDone atomic.Bool
				begin      = time.Now()
			)
			handler := func(ctx context.Context, job *runtime.Job) error {
				p, err := runtime.DecodePayload[struct{ Name string }](job)
				if err != nil {
					return err
				}
				mu.Lock()
				if p.Name == "stream" {
					streamEnd = time.Now()
				} else {
					started[p.Name] = time.Now()
				}
				mu.Unlock()
				if p.Name != "stream" {
					return nil
				}
				time.Sleep(3 * time.Millisecond)
				if time.Since(begin) > streamFor {
					streamDone.Store(true)
					return nil
				}
				// Each stream job puts another behind it: the backlog stays.
				_, err = runtime.Enqueue(ctx, b.pool, runtime.EnqueueRequest{Kind: "s", Payload: mustJSON(t, map[string]string{"Name": "stream"})})
				return err
			}
			reqs := make([]runtime.EnqueueRequest, backlog)
			for i := range reqs {
				reqs[i] = runtime.EnqueueRequest{Kind: "s", Payload: mustJSON(t, map[string]string{"Name": "stream"})}
			}
			if _, err := runtime.EnqueueMany(ctx, b.pool, reqs); err != nil {
				t.Fatal(err)
			}
			enqueue(t, b.pool, "s", map[string]string{"Name": "aged"}, runtime.WithPriority(10), runtime.WithAging(50*time.Millisecond))
			enqueue(t, b.pool, "s", map[string]string{"Name": "delayed"}, runtime.WithDelay(300*time.Millisecond))
			enqueue(t, b.pool, "s", map[string]string{"Name": "strict"}, runtime.WithPriority(10), runtime.WithAging(runtime.StrictPriority))
			// The backlog of better jobs, which each job renews, is larger
			// than any claim: no claim comes up short of better jobs. The
			// held default (10 runners) as it is; the lease default (100)
			// would need a backlog beyond a test's means.
			qc := runtime.QueueConfig{Mode: mode}
			if mode == runtime.ModeLease {
				qc.Concurrency = 4
			}
			startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: qc}},
				runtime.Registration{Kind: "s", Handler: handler})
			jobs := b.waitQueueDone(t, runtime.DefaultQueue, 60*time.Second)
			for _, j := range jobs {
				if j.Status != testdb.PgtaskJobStatusSucceeded {
					t.Errorf("job %d is %s: %s", j.ID, j.Status, j.Errors)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if !streamDone.Load() {
				t.Fatal("the stream did not run its course")
			}
			t.Logf("started: aged %s, delayed %s, strict %s; the stream's last %s", started["aged"].Sub(begin),
				started["delayed"].Sub(begin), started["strict"].Sub(begin), streamEnd.Sub(begin))
			// 10 levels of 50 ms or a delay of 300 ms, a maintenance round,
			// and the backlog ahead: well within the stream's 4 s.
			for _, name := range []string{"aged", "delayed"} {
				if at := started[name]; at.IsZero() || !at.Before(streamEnd.Add(-time.Second)) {
					t.Errorf("the %s job started at %s, not while the stream ran (its last job at %s)", name, at.Sub(begin), streamEnd.Sub(begin))
				}
			}
			if strict := started["strict"]; !strict.After(streamEnd.Add(-time.Second)) {
				t.Errorf("the strict job started at %s, while the stream ran (its last job at %s)", strict.Sub(begin), streamEnd.Sub(begin))
			}
		})
	}
}

// A maintenance round reads only the jobs that are due. With 2,000 queued
// jobs that may age but are not due yet, and 2,000 scheduled for later, a
// round reads a few index entries, not all of them.
func TestMaintenanceRoundsReadOnlyTheJobsThatAreDue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const n = 2000
	reqs := make([]runtime.EnqueueRequest, 0, 2*n)
	for i := range 2 * n {
		r := runtime.EnqueueRequest{Kind: "k", Payload: mustJSON(t, map[string]int{"i": i})}
		if i < n {
			r.Apply(runtime.WithPriority(5), runtime.WithAging(time.Hour))
		} else {
			r.Apply(runtime.WithDelay(time.Hour))
		}
		reqs = append(reqs, r)
	}
	if _, err := runtime.EnqueueMany(ctx, b.pool, reqs); err != nil {
		t.Fatal(err)
	}
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	q, tq := gen.New(conn), testdb.New(conn)
	reads := func(index string) int64 {
		t.Helper()
		// The first call flushes this session's counts; the second reads them.
		if _, err := tq.IndexReads(ctx, index); err != nil {
			t.Fatal(err)
		}
		r, err := tq.IndexReads(ctx, index)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	before := reads("jobs_aging")
	if r, err := q.AgePriorities(ctx, 100); err != nil || r.Aged != 0 {
		t.Fatalf("aging: %+v, %v; want nothing due", r, err)
	}
	if got := reads("jobs_aging") - before; got > 10 {
		t.Errorf("an aging round read %d entries of jobs_aging with nothing due, want at most 10", got)
	}
	before = reads("jobs_scheduled")
	if r, err := q.PromoteScheduled(ctx, 100); err != nil || r.Moved != 0 {
		t.Fatalf("promotion: %+v, %v; want nothing due", r, err)
	}
	if got := reads("jobs_scheduled") - before; got > 10 {
		t.Errorf("a promotion round read %d entries of jobs_scheduled with nothing due, want at most 10", got)
	}
}

// An operator's retry starts a job's wait for a better priority again:
// the time it spent finished does not count as waiting.
func TestAnOperatorsRetryStartsTheAgingWaitAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithPriority(10), runtime.WithAging(100*time.Millisecond))
	if ok, err := runtime.CancelJob(ctx, b.pool, id); err != nil || !ok {
		t.Fatalf("cancel: %v, %v", ok, err)
	}
	time.Sleep(600 * time.Millisecond)
	if ok, err := runtime.RetryJob(ctx, b.pool, id); err != nil || !ok {
		t.Fatalf("retry: %v, %v", ok, err)
	}
	if _, err := b.gen.AgePriorities(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if j := b.job(t, id); j.Priority != 10 || j.AgeDue == nil {
		t.Errorf("right after the retry: priority %d, age_due %v; want 10, due in 100 ms", j.Priority, j.AgeDue)
	}
}
