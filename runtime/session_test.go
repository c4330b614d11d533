package runtime_test

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// withSessionDefault returns dsn with a setting every session it opens
// starts with, as `ALTER DATABASE ... SET` or `ALTER ROLE ... SET` would
// give them.
func withSessionDefault(t *testing.T, dsn, setting string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("options", "-c "+setting)
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // pgx reads + as itself
	return u.String()
}

// A database or role may set idle_session_timeout. A worker's sessions wait
// idle for work, and its listener always does: were they ended, the worker
// would log a reconnect of its listener each time and miss notifications
// meanwhile, and with all of them gone its worker lock would be free while
// it runs a leased job, which another worker would take over. The worker
// turns the timeout off for its own sessions.
func TestIdleSessionTimeoutLeavesTheWorkersSessionsAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	logs := &recordedLogs{}
	started := make(chan struct{}, 1)
	w := startWorker(t, withSessionDefault(t, b.url, "idle_session_timeout=1s"), runtime.Config{
		Logger:       slog.New(logs),
		PollInterval: time.Minute, // only a notification wakes it in time
		Queues: map[string]runtime.QueueConfig{
			runtime.DefaultQueue: {},
			"leased":             {Mode: runtime.ModeLease, Lease: 3 * time.Second},
		},
	},
		runtime.Registration{Kind: "quick", Handler: func(context.Context, *runtime.Job) error { return nil }},
		runtime.Registration{Kind: "slow", Mode: runtime.ModeLease, Handler: func(ctx context.Context, job *runtime.Job) error {
			started <- struct{}{}
			select {
			case <-time.After(3 * time.Second):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}},
	)

	slow := enqueue(t, b.pool, "slow", map[string]int{}, runtime.WithQueue("leased"))
	<-started
	// Another worker looks for orphans all the while the leased job runs,
	// with every session of the first idle for many times the timeout.
	other := w.ID() + 1
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		rescued, err := b.gen.RescueOrphans(ctx, gen.RescueOrphansParams{Max: 10, WorkerID: other})
		if err != nil {
			t.Fatal(err)
		}
		if len(rescued) > 0 {
			t.Fatalf("another worker rescued %v while the worker that runs it lived", rescued)
		}
		time.Sleep(20 * time.Millisecond)
	}
	j := b.waitStatus(t, slow, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	if j.Attempts != 1 || j.StaleOutcomes != 0 {
		t.Fatalf("leased job: attempts=%d stale outcomes=%d, want one attempt", j.Attempts, j.StaleOutcomes)
	}

	quick := enqueue(t, b.pool, "quick", map[string]int{})
	b.waitStatus(t, quick, 5*time.Second, testdb.PgtaskJobStatusSucceeded)
	logs.mu.Lock()
	defer logs.mu.Unlock()
	for _, r := range logs.records {
		if r.Level >= slog.LevelWarn {
			var attrs []string
			r.Attrs(func(a slog.Attr) bool { attrs = append(attrs, a.String()); return true })
			t.Errorf("logged %v %q %v", r.Level, r.Message, attrs)
		}
	}
}
