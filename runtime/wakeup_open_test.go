package runtime_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
)

// A transaction that enqueued into the queue and stays open (a producer's
// long transaction, a held handler that enqueued through job.Tx() and runs
// on) must not hold back the wake-up of jobs committed by others between a
// runner's empty claim and its listener taking the idle lock: those did
// not notify, and only the claim that taking the lock triggers finds them.
// The rounds are those of TestCoalescedWakeUpsLeaveNoJobWaiting.
func TestWakeUpNotHeldBackByAnOpenEnqueue(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			const queue = "race"
			const rounds, producers, runners, slow = 20, 4, 2, 70 * time.Millisecond
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
				Queues:       map[string]runtime.QueueConfig{queue: {Mode: mode, Concurrency: runners}},
			}
			startWorker(t, b.url, cfg, reg)
			time.Sleep(300 * time.Millisecond)

			req := func(sleep time.Duration) runtime.EnqueueRequest {
				r := runtime.EnqueueRequest{Kind: "race", Payload: mustJSON(t, map[string]time.Duration{"Sleep": sleep})}
				r.Apply(runtime.WithQueue(queue))
				return r
			}
			// The open enqueue: begun before the rounds, committed after.
			open, err := b.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer open.Rollback(ctx) //nolint:errcheck // rolled back at the end
			if _, err := runtime.Enqueue(ctx, open, req(0)); err != nil {
				t.Fatal(err)
			}

			enqueue := func(sleep time.Duration, beforeCommit func()) (runtime.JobID, time.Time) {
				tx, err := b.pool.Begin(ctx)
				if err != nil {
					t.Error(err)
					return 0, time.Time{}
				}
				defer tx.Rollback(ctx) //nolint:errcheck // committed by then, but on an error
				id, err := runtime.Enqueue(ctx, tx, req(sleep))
				if err != nil {
					t.Error(err)
					return 0, time.Time{}
				}
				beforeCommit()
				if err := tx.Commit(ctx); err != nil {
					t.Error(err)
					return 0, time.Time{}
				}
				return id, time.Now()
			}
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
					id, at := enqueue(slow, func() {})
					committed[id] = at
				}
				var wg sync.WaitGroup
				for range producers {
					wg.Go(func() {
						time.Sleep(55 * time.Millisecond)
						id, at := enqueue(0, func() {
							select {
							case <-allEnded:
							case <-time.After(5 * time.Second):
							}
							time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
						})
						cmu.Lock()
						committed[id] = at
						cmu.Unlock()
					})
				}
				wg.Wait()
				if t.Failed() {
					return
				}
				time.Sleep(time.Second)
				mu.Lock()
				for id, at := range committed {
					if s, ok := started[id]; !ok || s.Sub(at) > time.Second {
						late++
						t.Errorf("round %d: job %d did not start within a second of its commit (a lost wake-up)", round, id)
					}
				}
				mu.Unlock()
				if late > 0 {
					return
				}
			}
		})
	}
}
