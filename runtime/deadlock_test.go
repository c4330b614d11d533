package runtime_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// A caller's transaction enqueues into groups b then a and stays open while
// workers finish the heads of a and b, in one batch or one at a time (the
// single success's own path, which records it with the head still marked
// when it cannot lock the group's row). Workers never wait for an
// enqueuer's lock, so nothing deadlocks; the groups move on once the caller
// commits.
func TestOpenEnqueueTransactionDoesNotDeadlockWorkers(t *testing.T) {
	for _, batch := range []int{1, 2} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			t.Parallel()
			testOpenEnqueueTransaction(t, batch)
		})
	}
}

func testOpenEnqueueTransaction(t *testing.T, batch int) {
	b := setup(t)
	ctx := context.Background()
	heads := []runtime.JobID{
		enqueue(t, b.pool, "k", map[string]int{}, runtime.WithGroup("a")),
		enqueue(t, b.pool, "k", map[string]int{}, runtime.WithGroup("b")),
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	later := []runtime.JobID{
		enqueue(t, tx, "k", map[string]int{}, runtime.WithGroup("b")),
		enqueue(t, tx, "k", map[string]int{}, runtime.WithGroup("a")),
	}
	startBatching(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 1, BatchSize: batch}}},
		runtime.Registration{Kind: "k", Handler: func(ctx context.Context, job *runtime.Job) error { return nil }})
	for _, id := range heads {
		if j := b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded); !j.IsHead {
			t.Errorf("head %d lost its mark while its group could not move on", id)
		}
	}
	time.Sleep(700 * time.Millisecond) // past the runner's patience: maintenance's turn
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range later {
		if j := b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded); j.Attempts != 1 {
			t.Errorf("job %d took %d attempts: %s", id, j.Attempts, j.Errors)
		}
	}
	for _, id := range append(heads, later...) {
		if j := b.job(t, id); j.IsHead {
			t.Errorf("job %d is still marked head after its group finished", id)
		}
	}
}

// Handlers of two groups enqueue into each other's group through their job
// transactions, from several runners. Every job must succeed at its first
// attempt: no deadlock aborts a job transaction. Each transaction runs one
// job, so it enqueues in one statement: a batch whose handlers enqueue into
// several groups without rows, in an order another batch reverses, can
// deadlock like inserts of the same unique keys (see the guarantees in
// docs/how-it-works.md).
func TestHandlersEnqueueingAcrossGroupsDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const depth = 40
	handler := func(ctx context.Context, job *runtime.Job) error {
		p, err := runtime.DecodePayload[struct{ N int }](job)
		if err != nil {
			return err
		}
		if p.N >= depth {
			return nil
		}
		other := map[string]string{"a": "z", "z": "a", "c": "y", "y": "c"}[job.Group]
		_, err = runtime.Enqueue(ctx, job.Tx(), runtime.EnqueueRequest{
			Kind: "ping", Payload: mustJSON(t, map[string]int{"N": p.N + 1}),
			EnqueueOptions: runtime.EnqueueOptions{Queue: "ping", Group: other},
		})
		return err
	}
	for _, batch := range []int{1, 1, 1} {
		startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{"ping": {Concurrency: 2, BatchSize: batch}}},
			runtime.Registration{Kind: "ping", Handler: handler})
	}
	for _, g := range []string{"a", "z", "c", "y"} {
		enqueue(t, b.pool, "ping", map[string]int{"N": 0}, runtime.WithQueue("ping"), runtime.WithGroup(g))
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		jobs := b.waitQueueDone(t, "ping", time.Until(deadline))
		if len(jobs) == 4*(depth+1) {
			for _, j := range jobs {
				if j.Status != testdb.PgtaskJobStatusSucceeded || j.Attempts != 1 {
					t.Fatalf("job %d: %s after %d attempts: %s", j.ID, j.Status, j.Attempts, j.Errors)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs, want %d", len(jobs), 4*(depth+1))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Cancelling the next job of a group while its head finishes: the group
// must still move on past the cancelled job.
func TestCancelRacingAGroupsAdvanceDoesNotStrandIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	release := make(chan struct{})
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "k", Handler: func(ctx context.Context, job *runtime.Job) error {
		if job.Attempt == 1 && strings.HasSuffix(string(job.Payload), `"first"}`) {
			<-release
		}
		return nil
	}})
	first := enqueue(t, b.pool, "k", map[string]string{"n": "first"}, runtime.WithGroup("g"))
	second := enqueue(t, b.pool, "k", map[string]string{"n": "second"}, runtime.WithGroup("g"))
	third := enqueue(t, b.pool, "k", map[string]string{"n": "third"}, runtime.WithGroup("g"))
	b.waitStatus(t, first, 10*time.Second, testdb.PgtaskJobStatusStarted)

	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := runtime.CancelJob(ctx, tx, second); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	close(release) // the head finishes while the cancel is uncommitted
	b.waitStatus(t, first, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, third, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	if j := b.job(t, second); j.Status != testdb.PgtaskJobStatusCancelled || j.IsHead {
		t.Fatalf("second: %s head=%v", j.Status, j.IsHead)
	}
	waitGroupGone(t, b, runtime.DefaultQueue, "g")
}

func waitGroupGone(t *testing.T, b *bundle, queue, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := b.q.GetGroup(context.Background(), testdb.GetGroupParams{Queue: queue, GroupKey: key}); err != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s/%s still has a row after its jobs finished", queue, key)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The abandoned attempt was the job's last: its group must still move on.
func TestAbandonedLastAttemptMovesTheGroupOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	startWorker(t, b.url, runtime.Config{AbandonGrace: 100 * time.Millisecond}, runtime.Registration{
		Kind:    "stubborn",
		Timeout: 100 * time.Millisecond,
		Handler: func(ctx context.Context, job *runtime.Job) error { <-release; return nil },
	}, runtime.Registration{
		Kind:    "next",
		Handler: func(ctx context.Context, job *runtime.Job) error { return nil },
	})
	stuck := enqueue(t, b.pool, "stubborn", map[string]int{}, runtime.WithGroup("g"), runtime.WithMaxAttempts(1))
	next := enqueue(t, b.pool, "next", map[string]int{}, runtime.WithGroup("g"))
	j := b.waitStatus(t, stuck, 10*time.Second, testdb.PgtaskJobStatusFailed)
	if e := errorsOf(t, j); len(e) != 1 || !strings.Contains(e[0].Error, "abandoned") {
		t.Fatalf("errors = %s", j.Errors)
	}
	b.waitStatus(t, next, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	waitGroupGone(t, b, runtime.DefaultQueue, "g")
}

// A handler is abandoned in the middle of a batch. Ending its session rolls
// back the whole batch: the job that ran before it, which wrote nothing,
// must be recorded as it ended, and its group must go on, not left started
// behind a dead session that no rescuer takes while the worker lives.
func TestAbandonedHandlerSettlesItsWholeBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	// One claim takes all three: the first two are heads, the third follows
	// its group's head.
	before := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithGroup("ga"))
	stuck := enqueue(t, b.pool, "stubborn", map[string]int{})
	after := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithGroup("ga"))
	var okRuns atomic.Int32
	startBatching(t, b.url, runtime.Config{
		AbandonGrace: 200 * time.Millisecond,
		Queues:       map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 1, BatchSize: 4}},
	}, stubbornOnce(release), runtime.Registration{
		Kind: "ok",
		Handler: func(ctx context.Context, job *runtime.Job) error {
			okRuns.Add(1)
			return nil
		},
	})
	j := b.waitStatus(t, before, 15*time.Second, testdb.PgtaskJobStatusSucceeded)
	if j.Attempts != 1 || string(j.Errors) != "[]" {
		t.Fatalf("the job before the abandoned one: attempts=%d errors=%s; want its success recorded as it was", j.Attempts, j.Errors)
	}
	s := b.waitStatus(t, stuck, 15*time.Second, testdb.PgtaskJobStatusSucceeded)
	if e := errorsOf(t, s); s.Attempts != 2 || len(e) != 1 || !strings.Contains(e[0].Error, "timed out") {
		t.Fatalf("the abandoned job: attempts=%d errors=%s", s.Attempts, s.Errors)
	}
	a := b.waitStatus(t, after, 15*time.Second, testdb.PgtaskJobStatusSucceeded)
	if a.Attempts != 1 {
		t.Fatalf("the job after the abandoned one never started, yet attempts=%d", a.Attempts)
	}
	waitGroupGone(t, b, runtime.DefaultQueue, "ga")
	if n := okRuns.Load(); n != 2 {
		t.Fatalf("ok ran %d times, want 2", n)
	}
}
