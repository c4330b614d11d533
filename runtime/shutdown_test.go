package runtime_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// Cancelling Run lets a running job finish within the grace period.
func TestShutdownLetsRunningJobsFinish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan struct{})
	_, stop := newWorker(t, b.url, runtime.Config{ShutdownGrace: 10 * time.Second}, runtime.Registration{
		Kind: "slow",
		Handler: func(ctx context.Context, job *runtime.Job) error {
			close(started)
			select {
			case <-time.After(500 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	})
	id := enqueue(t, b.pool, "slow", map[string]int{})
	<-started
	stop()
	if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusSucceeded || j.Attempts != 1 {
		t.Fatalf("after shutdown the job is %s after %d attempts, want succeeded in 1", j.Status, j.Attempts)
	}
}

// Past the grace period running jobs are cancelled and requeued to run again
// at once; jobs of the batch that had not started are handed back with their
// attempt returned.
func TestShutdownCancelsAfterGraceAndHandsBackTheRest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan struct{}, 3)
	ids := []runtime.JobID{
		enqueue(t, b.pool, "stuck", map[string]int{}),
		enqueue(t, b.pool, "stuck", map[string]int{}),
		enqueue(t, b.pool, "stuck", map[string]int{}),
	}
	_, stop := newBatching(t, b.url, runtime.Config{
		ShutdownGrace: 200 * time.Millisecond,
		Queues:        map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 1, BatchSize: 3}},
	}, runtime.Registration{
		Kind: "stuck",
		Handler: func(ctx context.Context, job *runtime.Job) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		},
	})
	<-started
	begun := time.Now()
	stop()
	if d := time.Since(begun); d > 5*time.Second {
		t.Errorf("shutdown took %s with a 200ms grace", d)
	}
	first := b.job(t, ids[0])
	if e := errorsOf(t, first); first.Status != testdb.PgtaskJobStatusQueued || first.Attempts != 1 || len(e) != 1 ||
		!strings.Contains(e[0].Error, "worker shut down") {
		t.Fatalf("cut-short job: %s, %d attempts, errors %s", first.Status, first.Attempts, first.Errors)
	}
	for _, id := range ids[1:] {
		if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusQueued || j.Attempts != 0 || string(j.Errors) != "[]" {
			t.Fatalf("unstarted job %d: %s, %d attempts, errors %s; want queued, 0, none", id, j.Status, j.Attempts, j.Errors)
		}
	}
}
