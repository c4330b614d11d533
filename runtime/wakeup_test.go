package runtime_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
)

// Enqueues notify only while some runner of their queue may be idle (see
// pgtask.enqueue_jobs and the listener's announceIdle). Here producers race
// two worker processes whose runners go idle and busy all the time: each
// producer enqueues in bursts with pauses between, some enqueues in a
// transaction that stays open a while after the insert; most handlers take
// a few milliseconds, and one in four long enough to keep every runner busy
// past the time the listener keeps announcing them idle. PollInterval is a minute, so a
// wake-up lost between an enqueue that did not notify and a runner going
// idle leaves its job waiting that long; every job must start within a
// second of its commit.
func TestCoalescedWakeUpsLeaveNoJobWaiting(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			testWakeUpRounds(t, mode, 2, false)
		})
	}
}

// A transaction that enqueued into the queue and stays open (a producer's
// long transaction, a held handler that enqueued through job.Tx() and runs
// on) must not hold back the wake-up of jobs committed by others between a
// runner's empty claim and its listener taking the idle lock: those did
// not notify, and only the claim that taking the lock triggers finds them.
// The rounds are those of TestCoalescedWakeUpsLeaveNoJobWaiting, on one
// worker.
func TestWakeUpNotHeldBackByAnOpenEnqueue(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			testWakeUpRounds(t, mode, 1, true)
		})
	}
}

// testWakeUpRounds races producers with workers (each of Concurrency 2)
// of one queue in mode, in rounds, and fails for a job that does not start
// within a second of its commit. With holdOpen, a transaction that enqueued
// into the queue stays open through every round.
func testWakeUpRounds(t *testing.T, mode runtime.Mode, workers int, holdOpen bool) {
	b := setup(t)
	ctx := context.Background()
	const queue = "race"
	const rounds, producers, slow = 20, 4, 70 * time.Millisecond
	runners := 2 * workers
	var mu sync.Mutex
	started := map[runtime.JobID]time.Time{}
	slowEnded := make(chan struct{}, runners)
	reg := runtime.Registration{Kind: "race", Queue: queue, Mode: mode, Handler: func(ctx context.Context, job *runtime.Job) error {
		mu.Lock()
		started[job.ID] = time.Now()
		mu.Unlock()
		var p struct{ Sleep time.Duration }
		if err := json.Unmarshal(job.Payload, &p); err != nil {
			return err
		}
		time.Sleep(p.Sleep)
		if p.Sleep >= slow {
			slowEnded <- struct{}{}
		}
		return nil
	}}
	cfg := runtime.Config{
		PollInterval: time.Minute,
		Queues:       map[string]runtime.QueueConfig{queue: {Mode: mode, Concurrency: 2}},
	}
	for range workers {
		startWorker(t, b.url, cfg, reg)
	}
	time.Sleep(300 * time.Millisecond) // listening, runners idle

	req := func(sleep time.Duration) runtime.EnqueueRequest {
		r := runtime.EnqueueRequest{Kind: "race", Payload: mustJSON(t, map[string]time.Duration{"Sleep": sleep})}
		r.Apply(runtime.WithQueue(queue))
		return r
	}
	if holdOpen {
		// Begun before the rounds, rolled back after.
		open, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer open.Rollback(ctx) //nolint:errcheck // it only holds its enqueue open
		if _, err := runtime.Enqueue(ctx, open, req(0)); err != nil {
			t.Fatal(err)
		}
	}
	enqueue := func(sleep time.Duration, beforeCommit func()) (runtime.JobID, time.Time, error) {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			return 0, time.Time{}, err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // committed by then, but on an error
		id, err := runtime.Enqueue(ctx, tx, req(sleep))
		if err != nil {
			return 0, time.Time{}, err
		}
		beforeCommit()
		if err := tx.Commit(ctx); err != nil {
			return 0, time.Time{}, err
		}
		return id, time.Now(), nil
	}
	// Each round: slow jobs take every runner for longer than the
	// listener keeps the idle lock, so the enqueues that begin
	// meanwhile do not notify; they commit just after the slow jobs
	// end, about when the runners, finding nothing, go idle. Then
	// nothing is enqueued, so no later notification covers a lost
	// wake-up.
	var lat []time.Duration
	late := 0
	for round := range rounds {
		committed := map[runtime.JobID]time.Time{}
		var cmu sync.Mutex
		allEnded := make(chan struct{})
		go func() {
			for range runners {
				<-slowEnded
			}
			close(allEnded)
		}()
		for range runners {
			id, at, err := enqueue(slow, func() {})
			if err != nil {
				t.Fatal(err)
			}
			committed[id] = at
		}
		var wg sync.WaitGroup
		for range producers {
			wg.Go(func() {
				time.Sleep(55 * time.Millisecond)
				id, at, err := enqueue(0, func() {
					select {
					case <-allEnded:
					case <-time.After(5 * time.Second):
					}
					time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
				})
				if err != nil {
					t.Error(err)
					return
				}
				cmu.Lock()
				committed[id] = at
				cmu.Unlock()
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		deadline := time.Now().Add(time.Second)
		for {
			mu.Lock()
			missing := 0
			for id := range committed {
				if _, ok := started[id]; !ok {
					missing++
				}
			}
			mu.Unlock()
			if missing == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		mu.Lock()
		for id, at := range committed {
			s, ok := started[id]
			if !ok || s.Sub(at) > time.Second {
				late++
				t.Errorf("round %d: job %d did not start within a second of its commit (a lost wake-up)", round, id)
				continue
			}
			lat = append(lat, s.Sub(at))
		}
		mu.Unlock()
		time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		t.Logf("%d jobs on time, %d late: commit to handler start p50 %s, p99 %s, max %s", len(lat), late,
			lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
	}
}

// An enqueue notifies while a listener announces an idle runner of its
// queue, and only then: while every runner is busy, its next claim finds
// the job.
func TestEnqueueNotifiesOnlyWhileARunnerIsIdle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	lc := listenFor(t, b)
	enqueue(t, b.pool, "ping", map[string]int{}, runtime.WithQueue("busy"))
	if got := wakeUp(t, lc, 300*time.Millisecond); got != "" {
		t.Fatalf("with no idle runner announced, the enqueue woke %q", got)
	}
	idle := listenFor(t, b, "busy")
	enqueue(t, b.pool, "ping", map[string]int{}, runtime.WithQueue("busy"))
	if got := wakeUp(t, lc, 5*time.Second); got != "busy" {
		t.Fatalf("with an idle runner announced, the enqueue woke %q; want busy", got)
	}
	enqueue(t, b.pool, "ping", map[string]int{}, runtime.WithQueue("other"))
	if got := wakeUp(t, lc, 300*time.Millisecond); got != "" {
		t.Fatalf("an enqueue into a queue with no idle runner woke %q", got)
	}
	idle.Close(context.Background())
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, err := b.q.CountListeners(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d listeners 10s after one closed, want 1", n)
		}
	}
	enqueue(t, b.pool, "ping", map[string]int{}, runtime.WithQueue("busy"))
	if got := wakeUp(t, lc, 300*time.Millisecond); got != "" {
		t.Fatalf("after the idle runner's listener closed, the enqueue woke %q", got)
	}
}
