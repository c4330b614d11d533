package runtime_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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

// A setting of the mode a queue does not run in is an error naming the
// setting, from NewWorker when the queue's configuration says its mode, and
// from Register when a kind's declared mode decides it; it is never
// silently ignored.
func TestSettingsOfTheOtherModeAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pc, err := pgxpool.ParseConfig(b.url)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		qc   runtime.QueueConfig
		want string
	}{
		{"BatchSize in lease mode", runtime.QueueConfig{Mode: runtime.ModeLease, BatchSize: 5},
			"new worker: queue emails: BatchSize applies to held mode only; queue emails runs in lease mode"},
		{"CommitBudget in lease mode", runtime.QueueConfig{Mode: runtime.ModeLease, CommitBudget: time.Second},
			"new worker: queue emails: CommitBudget applies to held mode only; queue emails runs in lease mode"},
		{"Lease in held mode", runtime.QueueConfig{Mode: runtime.ModeHeld, Lease: time.Minute},
			"new worker: queue emails: Lease applies to lease mode only; queue emails runs in held mode"},
		{"Lease with no mode", runtime.QueueConfig{Lease: time.Minute},
			"new worker: queue emails: Lease applies to lease mode only; set the queue's Mode to ModeLease"},
	} {
		w, err := runtime.NewWorker(context.Background(), pc, runtime.Config{Queues: map[string]runtime.QueueConfig{"emails": c.qc}})
		if err == nil {
			w.Close()
		}
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: NewWorker: %v, want %q", c.name, err, c.want)
		}
	}

	ok := func(context.Context, *runtime.Job) error { return nil }
	for _, c := range []struct {
		name string
		qc   runtime.QueueConfig
		reg  runtime.Registration
		want string
	}{
		{"BatchSize on a queue a kind runs in lease mode", runtime.QueueConfig{BatchSize: 5},
			runtime.Registration{Kind: "send", Queue: "emails", Mode: runtime.ModeLease, Handler: ok},
			"register send: queue emails: BatchSize applies to held mode only; kind send runs the queue in lease mode"},
		{"CommitBudget on a queue a kind runs in lease mode", runtime.QueueConfig{CommitBudget: time.Second},
			runtime.Registration{Kind: "send", Queue: "emails", Mode: runtime.ModeLease, Handler: ok},
			"register send: queue emails: CommitBudget applies to held mode only; kind send runs the queue in lease mode"},
		{"a kind that declares the other mode", runtime.QueueConfig{Mode: runtime.ModeLease, Lease: time.Minute},
			runtime.Registration{Kind: "send", Queue: "emails", Mode: runtime.ModeHeld, Handler: ok},
			"register send: kind send needs mode held, but queue emails runs in mode lease (configured): " +
				"serve the kinds of different modes from different queues, or set QueueConfig.Mode"},
	} {
		w := idleWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{"emails": c.qc}})
		if err := w.Register(c.reg); err == nil || err.Error() != c.want {
			t.Errorf("%s: Register: %v, want %q", c.name, err, c.want)
		}
	}
}

// The settings of its mode are what a queue runs with: a kind's declared
// mode decides the mode of a queue whose configuration does not say, and a
// lease-mode queue's jobs are claimed for its Lease, not the default.
func TestSettingsOfTheQueuesModeAreAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ok := func(context.Context, *runtime.Job) error { return nil }
	w := idleWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{
		"held":   {Mode: runtime.ModeHeld, BatchSize: 8, Concurrency: 2},
		"either": {Concurrency: 2},
	}})
	for _, r := range []runtime.Registration{
		{Kind: "h", Queue: "held", Mode: runtime.ModeHeld, Handler: ok},
		{Kind: "e", Queue: "either", Mode: runtime.ModeLease, Handler: ok},
		{Kind: "any", Queue: "either", Handler: ok},
	} {
		if err := w.Register(r); err != nil {
			t.Fatalf("Register %s: %v", r.Kind, err)
		}
	}
	if _, err := w.Drain(context.Background()); err == nil || !strings.Contains(err.Error(), "queue either runs in lease mode") {
		t.Errorf("Drain: %v, want the queue its kind put in lease mode refused", err)
	}

	release := make(chan struct{})
	running := make(chan struct{}, 1)
	startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{"lease": {Mode: runtime.ModeLease, Lease: 4 * time.Second}}},
		runtime.Registration{Kind: "l", Queue: "lease", Handler: func(context.Context, *runtime.Job) error {
			running <- struct{}{}
			<-release
			return nil
		}})
	defer close(release)
	id := enqueue(t, b.pool, "l", map[string]int{}, runtime.WithQueue("lease"))
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the lease-mode job did not start")
	}
	j := b.job(t, id)
	if j.LeaseUntil == nil || time.Until(*j.LeaseUntil) > 6*time.Second {
		t.Errorf("the job is leased until %v, want within the queue's Lease of 4s from now", j.LeaseUntil)
	}
}
