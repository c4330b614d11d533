package runtime_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

const longest = time.Duration(math.MaxInt64)

// Durations near the largest time.Duration mean "very long", and jobs still
// run: a timeout or grace that long once overflowed the idle timeout set on
// job transactions, which the server refused, so every claim failed.
func TestHugeDurationsStillRunJobs(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		cfg     runtime.Config
		timeout time.Duration
	}{
		"Registration.Timeout":  {timeout: longest},
		"Config.DefaultTimeout": {cfg: runtime.Config{DefaultTimeout: longest}},
		"Config.AbandonGrace":   {cfg: runtime.Config{AbandonGrace: longest}},
		"Config.ShutdownGrace":  {cfg: runtime.Config{ShutdownGrace: longest}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			c.cfg.Queues = map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 1}}
			startWorker(t, b.url, c.cfg, runtime.Registration{
				Kind: "k", Timeout: c.timeout, Handler: func(context.Context, *runtime.Job) error { return nil },
			})
			id := enqueue(t, b.pool, "k", map[string]int{})
			if j := b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded); j.Attempts != 1 {
				t.Fatalf("succeeded after %d attempts", j.Attempts)
			}
		})
	}
}

// A lease too short for its heartbeat to keep cannot work: NewWorker says
// so, naming the setting.
func TestShortLeaseIsRefused(t *testing.T) {
	t.Parallel()
	pc, err := pgxpool.ParseConfig("postgres://127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	for _, lease := range []time.Duration{time.Nanosecond, 2 * time.Nanosecond, 500 * time.Microsecond, 999 * time.Millisecond} {
		_, err := runtime.NewWorker(context.Background(), pc, runtime.Config{Queues: map[string]runtime.QueueConfig{"q": {Mode: runtime.ModeLease, Lease: lease}}})
		if err == nil || !strings.Contains(err.Error(), "queue q: Lease "+lease.String()+" is shorter than 1s") {
			t.Errorf("Lease %s: %v, want an error naming the queue's Lease", lease, err)
		}
	}
}

// A backoff of huge durations waits very long; it never turns negative,
// which would retry at once.
func TestBackoffOfHugeDurationsWaitsLong(t *testing.T) {
	t.Parallel()
	for _, b := range []runtime.Backoff{
		{Min: longest, Max: longest},
		{Min: longest},
		{Min: 2 * time.Hour, Max: longest},
		{Min: longest / 2, Max: longest, Jitter: 0.5},
	} {
		for _, attempt := range []int{1, 2, 30, 100, 10000} {
			for range 50 {
				if d := b.Delay(attempt); d < time.Hour {
					t.Fatalf("%+v.Delay(%d) = %s, want at least an hour", b, attempt, d)
				}
			}
		}
	}
}

// A backoff whose jitter is not a number would give every retry a wait
// that is not one either (on amd64 a negative one: a retry at once):
// Register refuses it, naming the field.
func TestRegisterRefusesNaNJitter(t *testing.T) {
	t.Parallel()
	w := idleWorker(t, setup(t).url, runtime.Config{})
	err := w.Register(runtime.Registration{Kind: "k", Backoff: runtime.Backoff{Jitter: math.NaN()},
		Handler: func(context.Context, *runtime.Job) error { return nil }})
	if err == nil || !strings.Contains(err.Error(), "Backoff.Jitter") {
		t.Fatalf("Register: %v, want an error naming Backoff.Jitter", err)
	}
	// Called directly, Delay takes the default jitter for it.
	if d := (runtime.Backoff{Min: time.Hour, Jitter: math.NaN()}).Delay(1); d < 48*time.Minute || d > 72*time.Minute {
		t.Fatalf("Delay with a NaN jitter: %s, want 1h ±20%%", d)
	}
}
