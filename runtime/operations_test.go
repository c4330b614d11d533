package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// A pause holds across every worker, held and lease mode alike, while they
// race through a queue: no claim that starts after PauseQueue returned takes
// a job, a worker started during the pause takes none either, and
// ResumeQueue wakes them all (they poll only once a minute).
func TestPauseStopsEveryWorkersClaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	count := func(n int64, err error) int64 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	var ran atomic.Int64
	work := runtime.Registration{Kind: "work", Handler: func(ctx context.Context, job *runtime.Job) error {
		ran.Add(1)
		time.Sleep(time.Millisecond)
		return nil
	}}
	held := runtime.Config{PollInterval: time.Minute, Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 3}}}
	lease := runtime.Config{PollInterval: time.Minute, Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: runtime.ModeLease}}}
	batched := runtime.Config{PollInterval: time.Minute, Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 2, BatchSize: 8}}}
	for _, cfg := range []runtime.Config{held, lease, batched} {
		startWorker(t, b.url, cfg, work)
	}
	const total = 3000
	reqs := make([]runtime.EnqueueRequest, total)
	for i := range reqs {
		reqs[i] = runtime.EnqueueRequest{Kind: "work", Payload: json.RawMessage(`{}`)}
		if i%3 == 0 {
			reqs[i].Group = fmt.Sprintf("g%d", i%50)
		}
	}
	if _, err := runtime.EnqueueMany(ctx, b.pool, reqs); err != nil {
		t.Fatal(err)
	}
	for ran.Load() < total/10 {
		time.Sleep(5 * time.Millisecond)
	}
	if paused, err := runtime.PauseQueue(ctx, b.pool, runtime.DefaultQueue); err != nil || !paused {
		t.Fatalf("PauseQueue: %v, %v", paused, err)
	}
	pausedBy, err := b.q.DatabaseNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := runtime.PauseQueue(ctx, b.pool, runtime.DefaultQueue); err != nil || again {
		t.Fatalf("pausing a paused queue: %v, %v; want false", again, err)
	}
	startWorker(t, b.url, held, work) // starts during the pause
	time.Sleep(time.Second)
	if n := count(b.q.CountStartedAfter(ctx, testdb.CountStartedAfterParams{Queue: runtime.DefaultQueue, After: pausedBy})); n != 0 {
		t.Fatalf("%d jobs were claimed after the pause", n)
	}
	left := count(b.q.CountQueueStatus(ctx, testdb.CountQueueStatusParams{Queue: runtime.DefaultQueue, Status: testdb.PgtaskJobStatusQueued}))
	if left == 0 {
		t.Fatal("the queue drained before the pause: nothing was left to hold back")
	}
	if p, err := runtime.PausedQueues(ctx, b.pool); err != nil || len(p) != 1 || p[0].Queue != runtime.DefaultQueue {
		t.Fatalf("PausedQueues: %v, %v", p, err)
	}
	if resumed, err := runtime.ResumeQueue(ctx, b.pool, runtime.DefaultQueue); err != nil || !resumed {
		t.Fatalf("ResumeQueue: %v, %v", resumed, err)
	}
	b.waitQueueDone(t, runtime.DefaultQueue, 30*time.Second)
	if got := ran.Load(); got != total {
		t.Fatalf("ran %d jobs, want %d", got, total)
	}
}

// Retention deletes finished jobs past their status's age, keeps those of
// a status set to KeepForever, a job that still holds its unique key, and
// never a failure that blocks its group, whose next job stays behind it.
func TestRetentionDeletesFinishedJobsPastTheirAge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	regs := []runtime.Registration{
		{Kind: "ok", Handler: func(context.Context, *runtime.Job) error { return nil }},
		{Kind: "fail", Handler: func(context.Context, *runtime.Job) error { return runtime.NoRetry(errors.New("no")) }},
	}
	keep := runtime.Retention{Succeeded: runtime.KeepForever, Failed: runtime.KeepForever, Cancelled: runtime.KeepForever}
	_, stop := newWorker(t, b.url, runtime.Config{Retention: keep}, regs...)
	oldOK := enqueue(t, b.pool, "ok", map[string]int{})
	newOK := enqueue(t, b.pool, "ok", map[string]int{})
	oldFail := enqueue(t, b.pool, "fail", map[string]int{})
	blocking := enqueue(t, b.pool, "fail", map[string]int{}, runtime.WithGroup("g"), runtime.WithFailBlocksGroup(true))
	behind := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithGroup("g"))
	holder := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithUniqueKey("u"), runtime.WithUniqueStatuses(runtime.StatusSucceeded))
	oldCancelled := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithQueue("unserved"))
	if ok, err := runtime.CancelJob(ctx, b.pool, oldCancelled); err != nil || !ok {
		t.Fatalf("cancel: %v, %v", ok, err)
	}
	for _, id := range []runtime.JobID{oldOK, newOK, holder} {
		b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	}
	for _, id := range []runtime.JobID{oldFail, blocking} {
		b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusFailed)
	}
	stop()
	for id, age := range map[runtime.JobID]time.Duration{
		oldOK: 2 * time.Hour, newOK: 10 * time.Minute, holder: 2 * time.Hour, oldFail: 2 * time.Hour, blocking: 2 * time.Hour, oldCancelled: 30 * 24 * time.Hour,
	} {
		if err := b.q.BackdateFinished(ctx, testdb.BackdateFinishedParams{ID: int64(id), AgeSeconds: age.Seconds()}); err != nil {
			t.Fatal(err)
		}
	}

	w := startWorker(t, b.url, runtime.Config{Retention: runtime.Retention{
		Succeeded: time.Hour, Failed: time.Hour, Cancelled: runtime.KeepForever, Interval: 50 * time.Millisecond,
	}}, regs...)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, errOK := runtime.GetJob(ctx, b.pool, oldOK)
		_, errFail := runtime.GetJob(ctx, b.pool, oldFail)
		if errors.Is(errOK, runtime.ErrJobNotFound) && errors.Is(errFail, runtime.ErrJobNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: old success %v, old failure %v; want both deleted (leader: %v)", errOK, errFail, w.IsLeader())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, id := range []runtime.JobID{newOK, blocking, behind, oldCancelled, holder} {
		if _, err := runtime.GetJob(ctx, b.pool, id); err != nil {
			t.Errorf("job %d: %v; want it kept", id, err)
		}
	}
	if j := b.job(t, behind); j.Status != testdb.PgtaskJobStatusQueued {
		t.Errorf("the job behind a blocking failure is %s, want queued", j.Status)
	}
}

// One leader at a time among workers in several processes: a worker
// process that leads and is killed with SIGKILL hands the duty on within
// seconds (its worker lock is gone), and a leader that stops resigns.
func TestLeaderFailsOverWithinSeconds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	proc := startWorkerProcess(t, b.url)
	var first int32
	waitFor(t, 20*time.Second, "the worker process to lead", func() bool {
		id, err := b.q.CurrentLeader(ctx)
		first = id
		return err == nil
	})
	var workers []*runtime.Worker
	var stops []func()
	for range 2 {
		w, stop := newWorker(t, b.url, runtime.Config{})
		t.Cleanup(stop)
		workers, stops = append(workers, w), append(stops, stop)
	}
	leaders := func() (n int, which int) {
		for i, w := range workers {
			if w.IsLeader() {
				n, which = n+1, i
			}
		}
		return n, which
	}
	time.Sleep(500 * time.Millisecond)
	if n, _ := leaders(); n != 0 {
		t.Fatalf("%d in-process workers lead while the worker process %d does", n, first)
	}
	if err := proc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var which int
	waitFor(t, 5*time.Second, "a new leader after the SIGKILL", func() bool {
		n, i := leaders()
		if n > 1 {
			t.Fatalf("%d leaders at once", n)
		}
		which = i
		return n == 1
	})
	t.Logf("a new leader %s after the SIGKILL", time.Since(killed).Round(time.Millisecond))
	if id, err := b.q.CurrentLeader(ctx); err != nil || id != workers[which].ID() {
		t.Fatalf("the table names %d (%v), want worker %d", id, err, workers[which].ID())
	}
	stops[which]()
	other := workers[1-which]
	waitFor(t, 5*time.Second, "the other worker to lead once the leader stopped", other.IsLeader)
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PauseQueue waits for a claim that checked before the pause to commit, so
// that none is still taking jobs when it returns.
func TestPauseWaitsForClaimsInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	enqueue(t, b.pool, "k", map[string]int{})
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	rows, err := gen.New(tx).ClaimJobs(ctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: 1})
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim: %v, %v", rows, err)
	}
	paused := make(chan error, 1)
	go func() {
		_, err := runtime.PauseQueue(ctx, b.pool, runtime.DefaultQueue)
		paused <- err
	}()
	select {
	case err := <-paused:
		t.Fatalf("PauseQueue returned (%v) while a claim that began before it was open", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-paused:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("PauseQueue still waiting after the claim committed")
	}
}
