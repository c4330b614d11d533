package runtime_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// sessionsName is the application_name of the worker's connections in the
// connection-budget tests: they count the worker's sessions by it.
const sessionsName = "pgtask budget test"

// watchSessions counts, every few milliseconds until the returned function
// is called, the sessions of b's database named sessionsName, and that
// function returns the most it saw at once.
func watchSessions(t *testing.T, b *bundle) (peak func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var most atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			n, err := b.q.CountSessionsNamed(ctx, sessionsName)
			if err == nil {
				most.Store(max(most.Load(), n))
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	return func() int {
		cancel()
		wg.Wait()
		return int(most.Load())
	}
}

// threeQueues are three held-mode queues at their default Concurrency.
var threeQueues = map[string]runtime.QueueConfig{"q1": {}, "q2": {}, "q3": {}}

// enqueueSleepers registers, for each of threeQueues, a kind whose handler
// keeps its job's connection for a while, and enqueues perQueue jobs of it.
func enqueueSleepers(t *testing.T, b *bundle, w *runtime.Worker, perQueue int) {
	t.Helper()
	for q := range threeQueues {
		if err := w.Register(runtime.Registration{Kind: "sleep_" + q, Queue: q, Handler: func(ctx context.Context, job *runtime.Job) error {
			time.Sleep(15 * time.Millisecond)
			return nil
		}}); err != nil {
			t.Fatal(err)
		}
		for range perQueue {
			enqueue(t, b.pool, "sleep_"+q, map[string]int{}, runtime.WithQueue(q))
		}
	}
}

// runUntilDone runs w until every job of threeQueues has succeeded and
// returns the most sessions named sessionsName seen meanwhile.
func runUntilDone(t *testing.T, b *bundle, w *runtime.Worker) int {
	t.Helper()
	peak := watchSessions(t, b)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for q := range threeQueues {
		for _, j := range b.waitQueueDone(t, q, 30*time.Second) {
			if j.Status != testdb.PgtaskJobStatusSucceeded {
				t.Errorf("job %d of queue %s is %s", j.ID, q, j.Status)
			}
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return peak()
}

// A worker on an application's pool built with pgx's defaults (MaxConns
// max(4, NumCPU)) serves three held-mode queues at their default
// Concurrency: its connections are one budget, the pool's MaxConns, that it
// divides among its queues, its listener and its maintenance, and it holds
// no more of the server's connections than that.
func TestWorkerOnADefaultPoolServesThreeHeldQueues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(b.url)
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.RuntimeParams["application_name"] = sessionsName
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	budget := int(pool.Config().MaxConns)
	w, err := runtime.NewWorkerFromPool(ctx, pool, runtime.Config{
		Queues:              threeQueues,
		MaintenanceInterval: 50 * time.Millisecond,
		Logger:              testLogger(t),
	})
	if err != nil {
		t.Fatalf("three held queues on a pool of pgx's default MaxConns (%d): %v", budget, err)
	}
	defer w.Close()
	enqueueSleepers(t, b, w, 30)
	peak := runUntilDone(t, b, w)
	t.Logf("the worker held at most %d connections on a pool of %d", peak, budget)
	if peak > budget {
		t.Errorf("the worker held %d of the server's connections at once, more than its pool's MaxConns, %d", peak, budget)
	}
	if peak < 2 {
		t.Errorf("saw at most %d of the worker's sessions: the count does not see them", peak)
	}
}

// A worker with several queues keeps to one connection budget across
// them: by default, what its largest queue needs (a held queue's
// Concurrency) plus two, for the listener and maintenance.
func TestWorkerKeepsToItsConnectionBudget(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		cfg    runtime.Config
		budget int
	}{
		{"default", runtime.Config{}, 12},
		{"MaxConns 5", runtime.Config{MaxConns: 5}, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			pc, err := pgxpool.ParseConfig(b.url)
			if err != nil {
				t.Fatal(err)
			}
			pc.ConnConfig.RuntimeParams["application_name"] = sessionsName
			cfg := c.cfg
			cfg.Queues = threeQueues
			cfg.MaintenanceInterval = 50 * time.Millisecond
			cfg.Logger = testLogger(t)
			w, err := runtime.NewWorker(context.Background(), pc, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			enqueueSleepers(t, b, w, 60)
			peak := runUntilDone(t, b, w)
			t.Logf("the worker held at most %d connections on a budget of %d", peak, c.budget)
			if peak > c.budget {
				t.Errorf("the worker held %d of the server's connections at once, more than its budget, %d", peak, c.budget)
			}
			if peak < 3 {
				t.Errorf("saw at most %d of the worker's sessions: the count does not see them", peak)
			}
		})
	}
}

// A budget too small for the worker's queues is refused at start, with what
// it needs at least.
func TestWorkerRefusesABudgetBelowItsMinimum(t *testing.T) {
	t.Parallel()
	b := setup(t)
	err := startError(t, b.url, runtime.Config{MaxConns: 2})
	if !errors.Is(err, runtime.ErrNotEnoughConnections) {
		t.Errorf("MaxConns 2 with a held-mode queue: %v, want ErrNotEnoughConnections", err)
	}
	wantErrorText(t, err, "Config.MaxConns is 2", "needs at least 3")
	err = startError(t, b.url, runtime.Config{MaxConns: -1})
	wantErrorText(t, err, "MaxConns is -1")
	// Lease-mode queues hold no connection while their handlers run.
	w := idleWorker(t, b.url, runtime.Config{MaxConns: 2,
		Queues: map[string]runtime.QueueConfig{"a": {Mode: runtime.ModeLease}, "b": {Mode: runtime.ModeLease}}})
	if n := w.Pool().Config().MaxConns; n != 1 {
		t.Errorf("the pool of a worker of MaxConns 2 may open %d connections, want 1 (the listener has the other)", n)
	}
}

// Held-mode queues that share fewer connections than they have runners
// take turns on them: a queue with a long backlog does not keep another
// queue's job waiting until the backlog is done.
func TestQueuesTakeTurnsOnTheirConnections(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sleep := func(ctx context.Context, job *runtime.Job) error {
		time.Sleep(10 * time.Millisecond)
		return nil
	}
	const backlog = 300
	for range backlog {
		enqueue(t, b.pool, "busy", map[string]int{}, runtime.WithQueue("busy"))
	}
	// One runner's connection for both queues: 3 is the least.
	startWorker(t, b.url, runtime.Config{MaxConns: 3, Queues: map[string]runtime.QueueConfig{"busy": {}, "other": {}}},
		runtime.Registration{Kind: "busy", Queue: "busy", Handler: sleep},
		runtime.Registration{Kind: "other", Queue: "other", Handler: sleep})
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := b.q.CountQueueStatus(ctx, testdb.CountQueueStatusParams{Queue: "busy", Status: testdb.PgtaskJobStatusSucceeded})
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no job of the busy queue ran")
		}
		time.Sleep(5 * time.Millisecond)
	}
	other := enqueue(t, b.pool, "other", map[string]int{}, runtime.WithQueue("other"))
	b.waitStatus(t, other, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	left, err := b.q.CountQueueStatus(ctx, testdb.CountQueueStatusParams{Queue: "busy", Status: testdb.PgtaskJobStatusQueued})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the other queue's job ran with %d of %d jobs of the busy queue left", left, backlog)
	if left == 0 {
		t.Errorf("the other queue's job waited for the busy queue's %d jobs", backlog)
	}
}
