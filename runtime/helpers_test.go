package runtime_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// bundle is what most tests need: a database of their own and a pool on it.
type bundle struct {
	url  string
	pool *pgxpool.Pool
	q    *testdb.Queries // what tests read the database with
	gen  *gen.Queries    // the runtime's own queries, for tests that drive them
}

func setup(t *testing.T) *bundle {
	t.Helper()
	url := pgtasktest.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return newBundle(url, pool)
}

func newBundle(url string, pool *pgxpool.Pool) *bundle {
	return &bundle{url: url, pool: pool, q: testdb.New(pool), gen: gen.New(pool)}
}

// testLogger shows worker logs only with -v, where they help to read a failure.
func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startWorker runs a worker on url until the test ends.
func startWorker(t *testing.T, url string, cfg runtime.Config, regs ...runtime.Registration) *runtime.Worker {
	t.Helper()
	w, stop := newWorker(t, url, cfg, regs...)
	t.Cleanup(stop)
	return w
}

// startBatching starts a worker on url until the test ends whose held-mode
// runners (its lease-mode queues are left as they are) take whole batches (up to each queue's BatchSize) from their
// first claim: they judge the kinds of regs quick (PrimePace), and a queue
// that sets no CommitBudget commits only when its batch is done, so that
// what a test of a batch's inside sees does not hang on how fast the
// machine runs it.
func startBatching(t *testing.T, url string, cfg runtime.Config, regs ...runtime.Registration) *runtime.Worker {
	t.Helper()
	w, stop := newBatching(t, url, cfg, regs...)
	t.Cleanup(stop)
	return w
}

// newBatching is startBatching with the stop function of newWorker.
func newBatching(t *testing.T, url string, cfg runtime.Config, regs ...runtime.Registration) (*runtime.Worker, func()) {
	t.Helper()
	cfg.Queues = maps.Clone(cfg.Queues)
	held := []string{}
	for name, qc := range cfg.Queues {
		if qc.Mode == runtime.ModeLease {
			continue
		}
		if qc.CommitBudget == 0 {
			qc.CommitBudget = time.Hour
		}
		cfg.Queues[name] = qc
		held = append(held, name)
	}
	return newWorkerWith(t, url, cfg, func(w *runtime.Worker) error {
		for _, r := range regs {
			if err := w.Register(r); err != nil {
				return err
			}
		}
		for _, name := range held {
			for _, r := range regs {
				w.PrimePace(name, time.Microsecond, r.Kind)
			}
		}
		return nil
	})
}

// newWorker starts a worker and returns a stop function that cancels Run and
// waits for it to return.
func newWorker(t *testing.T, url string, cfg runtime.Config, regs ...runtime.Registration) (*runtime.Worker, func()) {
	t.Helper()
	return newWorkerWith(t, url, cfg, func(w *runtime.Worker) error {
		for _, r := range regs {
			if err := w.Register(r); err != nil {
				return err
			}
		}
		return nil
	})
}

// newWorkerWith is newWorker with what is registered left to prepare,
// which runs before Run.
func newWorkerWith(t *testing.T, url string, cfg runtime.Config, prepare func(*runtime.Worker) error) (*runtime.Worker, func()) {
	t.Helper()
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.MaintenanceInterval == 0 {
		cfg.MaintenanceInterval = 50 * time.Millisecond
	}
	cfg.ConnectionCheck = crowdedCheck(cfg.ConnectionCheck)
	w, err := runtime.NewWorker(context.Background(), pc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := prepare(w); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	return w, func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker Run: %v", err)
			}
			w.Close()
		})
	}
}

// idleWorker makes a worker on url that is not running (for Drain,
// WorkOne and tests that drive it), closed when the test ends.
func idleWorker(t *testing.T, url string, cfg runtime.Config) *runtime.Worker {
	t.Helper()
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	cfg.ConnectionCheck = crowdedCheck(cfg.ConnectionCheck)
	w, err := runtime.NewWorker(context.Background(), pc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// crowdedCheck is the connection check of the tests' workers, unless a
// test chose one: against max_connections, not the sessions open now. The
// suite runs packages side by side against one server, and their workers
// and pools come and go: a moment's crowd is the case CheckMax is for. The
// tests of the checks themselves (start_test.go) build their workers
// without these helpers.
func crowdedCheck(c runtime.ConnectionCheck) runtime.ConnectionCheck {
	if c == "" {
		return runtime.CheckMax
	}
	return c
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func enqueue(t *testing.T, db runtime.DB, kind string, payload any, opts ...runtime.EnqueueOption) runtime.JobID {
	t.Helper()
	req := runtime.EnqueueRequest{Kind: kind, Payload: mustJSON(t, payload)}
	req.Apply(opts...)
	id, err := runtime.Enqueue(context.Background(), db, req)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (b *bundle) job(t *testing.T, id runtime.JobID) testdb.PgtaskJob {
	t.Helper()
	j, err := b.q.GetJob(context.Background(), int64(id))
	if err != nil {
		t.Fatalf("get job %d: %v", id, err)
	}
	return j
}

// waitStatus waits until job id reaches one of statuses and returns it.
func (b *bundle) waitStatus(t *testing.T, id runtime.JobID, timeout time.Duration, statuses ...testdb.PgtaskJobStatus) testdb.PgtaskJob {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		j := b.job(t, id)
		if slices.Contains(statuses, j.Status) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d is %s after %s, want one of %v (errors %s)", id, j.Status, timeout, statuses, j.Errors)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitQueueDone waits until no job of queue is unfinished and returns its jobs.
func (b *bundle) waitQueueDone(t *testing.T, queue string, timeout time.Duration) []testdb.PgtaskJob {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		jobs, err := b.q.ListJobs(context.Background(), queue)
		if err != nil {
			// Tolerated for a while: tests restart the database under us.
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		pending := 0
		for _, j := range jobs {
			switch j.Status {
			case testdb.PgtaskJobStatusScheduled, testdb.PgtaskJobStatusQueued, testdb.PgtaskJobStatusStarted:
				pending++
			}
		}
		if pending == 0 {
			return jobs
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s still has %d unfinished of %d jobs after %s", queue, pending, len(jobs), timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type jobErrors []struct {
	Attempt int    `json:"attempt"`
	Error   string `json:"error"`
	Panic   bool   `json:"panic"`
	Stack   string `json:"stack"`
	At      string `json:"at"`
}

func errorsOf(t *testing.T, j testdb.PgtaskJob) jobErrors {
	t.Helper()
	var e jobErrors
	if err := json.Unmarshal(j.Errors, &e); err != nil {
		t.Fatalf("job %d errors %s: %v", j.ID, j.Errors, err)
	}
	return e
}

// stubbornOnce registers kind "stubborn": a 200ms timeout, and a first
// attempt that ignores its context until release is closed.
func stubbornOnce(release <-chan struct{}) runtime.Registration {
	return runtime.Registration{
		Kind:    "stubborn",
		Timeout: 200 * time.Millisecond,
		Backoff: fastRetry,
		Handler: func(ctx context.Context, job *runtime.Job) error {
			if job.Attempt == 1 {
				<-release // ignores its context
			}
			return nil
		},
	}
}

// addSuccess adds to p, as a worker records it, the success of attempt
// attempt of job id, claimed with token (0: none).
func addSuccess(p *gen.SettleJobsParams, id int64, attempt int32, token int64) {
	p.Ids, p.Attempts = append(p.Ids, id), append(p.Attempts, attempt)
	p.Results, p.Errors = append(p.Results, nil), append(p.Errors, nil)
	p.RetryInUs, p.SnoozeCaps, p.Tokens = append(p.RetryInUs, 0), append(p.SnoozeCaps, 0), append(p.Tokens, token)
}
