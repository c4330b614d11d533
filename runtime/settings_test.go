package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
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
