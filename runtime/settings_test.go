package runtime_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// A held-mode job has no lease to extend: Extend says so with
// ErrNotLeased, which a handler shared by both modes can ignore with
// errors.Is, rather than pretend it extended anything.
func TestExtendInHeldModeSaysThereIsNoLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := idleWorker(t, b.url, runtime.Config{})
	var extended error
	if err := w.Register(runtime.Registration{Kind: "held", Handler: func(ctx context.Context, job *runtime.Job) error {
		extended = job.Extend(ctx, time.Hour)
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	enqueue(t, b.pool, "held", map[string]int{})
	if n, err := w.Drain(ctx); n != 1 || err != nil {
		t.Fatalf("Drain: %d, %v; want 1 job run", n, err)
	}
	if !errors.Is(extended, runtime.ErrNotLeased) {
		t.Fatalf("Extend in held mode: %v, want ErrNotLeased", extended)
	}
}

// Drain and WorkOne work jobs in the calling goroutine, in held mode's
// way; they refuse a worker with a lease-mode queue, naming the queue,
// rather than run its jobs in a mode they were not written for, and leave
// its jobs queued.
func TestDrainAndWorkOneRefuseLeaseQueues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := idleWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{
		runtime.DefaultQueue: {}, "long": {Mode: runtime.ModeLease},
	}})
	ran := 0
	if err := w.Register(runtime.Registration{Kind: "long", Queue: "long", Handler: func(context.Context, *runtime.Job) error {
		ran++
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	id := enqueue(t, b.pool, "long", map[string]int{}, runtime.WithQueue("long"))
	const want = "queue long runs in lease mode"
	if n, err := w.Drain(ctx); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Drain: %d, %v; want an error saying %q", n, err, want)
	}
	if info, err := w.WorkOne(ctx); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("WorkOne: %v, %v; want an error saying %q", info, err, want)
	}
	if j := b.job(t, id); ran != 0 || j.Status != testdb.PgtaskJobStatusQueued || j.Attempts != 0 {
		t.Errorf("the lease-mode job ran %d times and is %s after %d attempts; want it queued, untouched", ran, j.Status, j.Attempts)
	}
}
