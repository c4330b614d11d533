package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

var fastRetry = runtime.Backoff{Min: 10 * time.Millisecond, Max: 20 * time.Millisecond, Jitter: -1}

func TestJobSucceedsWithResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{
		Kind: "double",
		Handler: func(ctx context.Context, job *runtime.Job) error {
			in, err := runtime.DecodePayload[struct{ N int }](job)
			if err != nil {
				return err
			}
			return job.SetResult(map[string]int{"n": in.N * 2})
		},
	})
	id := enqueue(t, b.pool, "double", map[string]int{"N": 21})
	j := b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	if string(j.Result) != `{"n": 42}` {
		t.Errorf("result = %s, want {\"n\": 42}", j.Result)
	}
	if j.Attempts != 1 || j.FinishedAt == nil || j.OwnerPid.Valid {
		t.Errorf("attempts=%d finished_at=%v owner=%v; want 1, set, cleared", j.Attempts, j.FinishedAt, j.OwnerPid)
	}
}

func TestFailuresRetryThenFail(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{
		Kind:    "flaky",
		Backoff: fastRetry,
		Handler: func(ctx context.Context, job *runtime.Job) error {
			calls.Add(1)
			return errors.New("boom " + job.Kind)
		},
	})
	id := enqueue(t, b.pool, "flaky", map[string]int{}, runtime.WithMaxAttempts(3))
	j := b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusFailed)
	if j.Attempts != 3 || calls.Load() != 3 {
		t.Fatalf("attempts=%d calls=%d, want 3 and 3", j.Attempts, calls.Load())
	}
	errs := errorsOf(t, j)
	if len(errs) != 3 {
		t.Fatalf("error history has %d entries, want 3: %s", len(errs), j.Errors)
	}
	for i, e := range errs {
		if e.Attempt != i+1 || e.Error != "boom flaky" || e.At == "" {
			t.Errorf("error %d = %+v", i, e)
		}
	}
}

func TestNoRetryFailsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{
		Kind: "final",
		Handler: func(ctx context.Context, job *runtime.Job) error {
			return runtime.NoRetry(errors.New("card declined"))
		},
	})
	id := enqueue(t, b.pool, "final", map[string]int{}, runtime.WithMaxAttempts(5))
	j := b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusFailed)
	if j.Attempts != 1 {
		t.Fatalf("attempts = %d, want 1", j.Attempts)
	}
	if e := errorsOf(t, j); len(e) != 1 || e[0].Error != "card declined" {
		t.Fatalf("errors = %s", j.Errors)
	}
}

func TestPanicIsAFailedAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{
		Kind:    "panics",
		Backoff: fastRetry,
		Handler: func(ctx context.Context, job *runtime.Job) error {
			if job.Attempt == 1 {
				panic("nil map somewhere")
			}
			return nil
		},
	})
	id := enqueue(t, b.pool, "panics", map[string]int{})
	j := b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	errs := errorsOf(t, j)
	if j.Attempts != 2 || len(errs) != 1 || !errs[0].Panic || errs[0].Error != "panic: nil map somewhere" ||
		!strings.Contains(errs[0].Stack, "worker_test.go") {
		t.Fatalf("attempts=%d errors=%s", j.Attempts, j.Errors)
	}
}

// A job of a kind the worker has no handler for is left queued, its
// attempts unspent, for a worker that has one; the worker goes on with the
// rest.
func TestUnknownKindWaitsAndWorkerGoesOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{
		Kind:    "known",
		Handler: func(ctx context.Context, job *runtime.Job) error { return nil },
	})
	bad := enqueue(t, b.pool, "unknown_kind", map[string]int{}, runtime.WithMaxAttempts(1))
	good := enqueue(t, b.pool, "known", map[string]int{})
	b.waitStatus(t, good, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	if j := b.job(t, bad); j.Status != testdb.PgtaskJobStatusQueued || j.Attempts != 0 {
		t.Fatalf("the job of an unknown kind is %s after %d attempts (errors %s)", j.Status, j.Attempts, j.Errors)
	}
}

func TestPayloadThatDoesNotDecodeFailsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type payload struct {
		N int `json:"n"`
	}
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{
		Kind: "typed",
		Handler: func(ctx context.Context, job *runtime.Job) error {
			_, err := runtime.DecodePayload[payload](job)
			return err
		},
	})
	bad := enqueue(t, b.pool, "typed", map[string]string{"n": "not a number"}, runtime.WithMaxAttempts(5))
	good := enqueue(t, b.pool, "typed", map[string]int{"n": 1})
	j := b.waitStatus(t, bad, 10*time.Second, testdb.PgtaskJobStatusFailed)
	if e := errorsOf(t, j); j.Attempts != 1 || len(e) != 1 || !strings.Contains(e[0].Error, "decode payload of job") {
		t.Fatalf("attempts=%d errors=%s", j.Attempts, j.Errors)
	}
	b.waitStatus(t, good, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
}

// The handler's writes through the job's transaction commit if and only if
// the attempt succeeds. The write here is a follow-up job enqueued in the
// job's transaction.
func TestHandlerWritesCommitOnlyWithSuccess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fail := func(ctx context.Context, job *runtime.Job) error { return errors.New("failed after writing") }
	outcomes := map[int]func(ctx context.Context, job *runtime.Job) error{
		1: fail,
		2: func(ctx context.Context, job *runtime.Job) error { panic("panicked after writing") },
		3: func(ctx context.Context, job *runtime.Job) error {
			<-ctx.Done() // times out after writing
			return ctx.Err()
		},
		4: func(ctx context.Context, job *runtime.Job) error { return nil },
	}
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{
		Kind:    "writer",
		Backoff: fastRetry,
		// Long enough for the enqueue below on a loaded machine: only the
		// third attempt runs into it.
		Timeout: 2 * time.Second,
		Handler: func(ctx context.Context, job *runtime.Job) error {
			outcome, ok := outcomes[job.Attempt]
			if !ok {
				return runtime.NoRetry(fmt.Errorf("attempt %d: want 4 at most", job.Attempt))
			}
			if _, err := runtime.Enqueue(ctx, job.Tx(), runtime.EnqueueRequest{
				Kind:           "effect",
				Payload:        mustJSON(t, map[string]int{"attempt": job.Attempt}),
				EnqueueOptions: runtime.EnqueueOptions{Queue: "effects"},
			}); err != nil {
				return err
			}
			return outcome(ctx, job)
		},
	})
	id := enqueue(t, b.pool, "writer", map[string]int{})
	j := b.waitStatus(t, id, 20*time.Second, testdb.PgtaskJobStatusSucceeded)
	if j.Attempts != 4 {
		t.Fatalf("attempts = %d, want 4 (errors %s)", j.Attempts, j.Errors)
	}
	effects, err := b.q.ListJobs(context.Background(), "effects")
	if err != nil {
		t.Fatal(err)
	}
	if len(effects) != 1 || string(effects[0].Payload) != `{"attempt": 4}` {
		t.Fatalf("effects = %+v, want exactly the one written by attempt 4", effects)
	}
	if e := errorsOf(t, j); len(e) != 3 || !strings.Contains(e[2].Error, "timed out after 2s") {
		t.Fatalf("errors = %s", j.Errors)
	}
}

func TestHandlerCannotEndTheJobTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got := make(chan [2]error, 1)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{
		Kind: "ender",
		Handler: func(ctx context.Context, job *runtime.Job) error {
			got <- [2]error{job.Tx().Commit(ctx), job.Tx().Rollback(ctx)}
			return nil
		},
	})
	id := enqueue(t, b.pool, "ender", map[string]int{})
	b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	errs := <-got
	for _, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "committed or rolled back by the worker") {
			t.Errorf("Commit/Rollback on the job's transaction = %v, want a refusal", err)
		}
	}
}

// A handler that swallows a failed statement leaves its transaction aborted;
// the job must fail rather than report success.
func TestIgnoredStatementErrorFailsTheJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{
		Kind: "sloppy",
		Handler: func(ctx context.Context, job *runtime.Job) error {
			// An invalid payload type makes the insert fail inside the database.
			_, _ = gen.New(job.Tx()).InsertJobs(ctx, gen.InsertJobsParams{
				Payloads: []json.RawMessage{json.RawMessage(`1`)}, Settings: []int32{1}, Groups: []int32{0},
				Kinds: []string{"k"}, Queues: []string{"q"}, Priorities: []int16{0}, AgingMs: []int32{0},
				MaxAttempts: []int32{1}, FailBlocksGroup: []bool{false}, RunAt: []string{""}, DelayUs: []int64{0},
				GroupQueues: []string{}, GroupKeys: []string{},
			})
			return nil
		},
	})
	id := enqueue(t, b.pool, "sloppy", map[string]int{}, runtime.WithMaxAttempts(1))
	j := b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusFailed)
	if e := errorsOf(t, j); len(e) != 1 || !strings.Contains(e[0].Error, "returned success but its transaction failed") {
		t.Fatalf("errors = %s", j.Errors)
	}
}

func TestTimeoutAndAbandon(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	startWorker(t, b.url, runtime.Config{AbandonGrace: 200 * time.Millisecond}, stubbornOnce(release), runtime.Registration{
		Kind:    "other",
		Handler: func(ctx context.Context, job *runtime.Job) error { return nil },
	})
	id := enqueue(t, b.pool, "stubborn", map[string]int{})
	j := b.waitStatus(t, id, 15*time.Second, testdb.PgtaskJobStatusSucceeded)
	if e := errorsOf(t, j); j.Attempts != 2 || len(e) != 1 || !strings.Contains(e[0].Error, "abandoned") {
		t.Fatalf("attempts=%d errors=%s", j.Attempts, j.Errors)
	}
	// The worker still works.
	b.waitStatus(t, enqueue(t, b.pool, "other", map[string]int{}), 10*time.Second, testdb.PgtaskJobStatusSucceeded)
}

func TestNotificationWakesIdleWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan time.Time, 1)
	startWorker(t, b.url, runtime.Config{PollInterval: time.Hour}, runtime.Registration{
		Kind: "ping",
		Handler: func(ctx context.Context, job *runtime.Job) error {
			started <- time.Now()
			return nil
		},
	})
	// Wait until the worker listens and its runners have gone idle: from
	// then on only a notification can wake them within the hour.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := b.q.CountListeners(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d listeners after 10s, want 1", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	// Each of these is runnable at once: an ungrouped job, a new group's
	// first job, a job whose start time has passed.
	for _, c := range []struct {
		name string
		opts []runtime.EnqueueOption
	}{
		{"ungrouped", nil},
		{"new group", []runtime.EnqueueOption{runtime.WithGroup("g")}},
		{"start time passed", []runtime.EnqueueOption{runtime.WithRunAt(time.Now().Add(-time.Hour))}},
	} {
		at := time.Now()
		enqueue(t, b.pool, "ping", map[string]int{}, c.opts...)
		select {
		case s := <-started:
			t.Logf("%s: notified worker started the job %s after the enqueue", c.name, s.Sub(at))
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: an idle worker polling once an hour did not start the job: the notification did not wake it", c.name)
		}
		time.Sleep(200 * time.Millisecond) // idle again
	}
}

func TestDelayedJobWaitsForItsTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan time.Time, 1)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{
		Kind: "later",
		Handler: func(ctx context.Context, job *runtime.Job) error {
			started <- time.Now()
			return nil
		},
	})
	at := time.Now()
	id := enqueue(t, b.pool, "later", map[string]int{}, runtime.WithDelay(700*time.Millisecond))
	if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusScheduled {
		t.Fatalf("status = %s, want scheduled", j.Status)
	}
	select {
	case s := <-started:
		if d := s.Sub(at); d < 600*time.Millisecond {
			t.Fatalf("started %s after enqueue, before its 700ms delay", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("delayed job never started")
	}
}

// A timeout longer than the server's largest idle-in-transaction timeout
// (24.8 days) still runs the job: the session's limit is clamped to what
// the server accepts.
func TestTimeoutBeyondTheServersLimitRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{
		Kind: "long", Timeout: 30 * 24 * time.Hour,
		Handler: func(context.Context, *runtime.Job) error { return nil },
	})
	id := enqueue(t, b.pool, "long", map[string]int{})
	b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
}

// The error history keeps the newest 25 failed attempts: a job that fails
// over and over does not grow a history every attempt must read and write.
func TestErrorHistoryKeepsTheNewest25(t *testing.T) {
	t.Parallel()
	b := setup(t)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{
		Kind: "flaky",
		Handler: func(_ context.Context, job *runtime.Job) error {
			return runtime.RetryAfter(0, fmt.Errorf("attempt %d failed", job.Attempt))
		},
	})
	id := enqueue(t, b.pool, "flaky", map[string]int{}, runtime.WithMaxAttempts(30))
	j := b.waitStatus(t, id, 30*time.Second, testdb.PgtaskJobStatusFailed)
	errs := errorsOf(t, j)
	if j.Attempts != 30 || len(errs) != 25 || errs[0].Attempt != 6 || errs[24].Attempt != 30 {
		t.Fatalf("attempts %d, history of %d entries from attempt %d to %d; want 30 attempts, entries 6 to 30",
			j.Attempts, len(errs), errs[0].Attempt, errs[len(errs)-1].Attempt)
	}
	for i, e := range errs {
		if want := fmt.Sprintf("attempt %d failed", 6+i); e.Attempt != 6+i || e.Error != want {
			t.Fatalf("entry %d: attempt %d %q, want attempt %d %q", i, e.Attempt, e.Error, 6+i, want)
		}
	}
}

// recordedLogs keeps a worker's log records for a test to read.
type recordedLogs struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *recordedLogs) Enabled(context.Context, slog.Level) bool { return true }
func (l *recordedLogs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}
func (l *recordedLogs) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *recordedLogs) WithGroup(string) slog.Handler      { return l }

func (l *recordedLogs) has(msg string) bool {
	_, ok := l.levelOf(msg)
	return ok
}

func (l *recordedLogs) levelOf(msg string) (slog.Level, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.records {
		if r.Message == msg {
			return r.Level, true
		}
	}
	return 0, false
}

// A final failure is logged as an error, apart from attempts that will be
// retried, which are warnings.
func TestFinalFailureIsLoggedAsAnError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logs := &recordedLogs{}
	startWorker(t, b.url, runtime.Config{Logger: slog.New(logs)}, runtime.Registration{
		Kind: "fail",
		Handler: func(_ context.Context, job *runtime.Job) error {
			if job.Attempt == 1 {
				return runtime.RetryAfter(0, errors.New("try again"))
			}
			return runtime.NoRetry(errors.New("give up"))
		},
	})
	id := enqueue(t, b.pool, "fail", map[string]int{})
	b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusFailed)
	// The worker logs what its commit recorded once the commit returns.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, ok := logs.levelOf("pgtask: job failed for good"); ok {
			break
		}
	}
	for msg, want := range map[string]slog.Level{
		"pgtask: job attempt failed; it will be retried": slog.LevelWarn,
		"pgtask: job failed for good":                    slog.LevelError,
	} {
		if got, ok := logs.levelOf(msg); !ok || got != want {
			t.Errorf("%q logged at %v (found %v), want %v", msg, got, ok, want)
		}
	}
}

// A handler for a kind whose queue the worker does not serve is reported
// when the worker starts: those jobs would otherwise wait without a word.
func TestUnservedQueueIsReportedAtStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logs := &recordedLogs{}
	startWorker(t, b.url, runtime.Config{Logger: slog.New(logs)}, runtime.Registration{
		Kind: "mail", Queue: "emails", Handler: func(context.Context, *runtime.Job) error { return nil },
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		level, ok := logs.levelOf("pgtask: this worker handles a kind whose queue it does not serve; such jobs wait for another worker")
		if ok && level == slog.LevelWarn {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warning about queue emails (found %v at %v)", ok, level)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// What jsonb cannot store (a NUL character) in an error text or a result
// must not make recording fail: that once failed the whole batch as a lost
// session, ignored NoRetry and the backoff, and lost the error text.
func TestNULInErrorsAndResultsIsRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	startBatching(t, b.url, runtime.Config{
		Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 1, BatchSize: 3}},
	}, runtime.Registration{
		Kind: "nul-error",
		Handler: func(ctx context.Context, job *runtime.Job) error {
			return runtime.NoRetry(errors.New("bad byte \x00 here"))
		},
	}, runtime.Registration{
		Kind: "nul-result",
		Handler: func(ctx context.Context, job *runtime.Job) error {
			if err := job.SetResult(map[string]string{"s": "a\x00b"}); err == nil {
				return errors.New("SetResult accepted a NUL character")
			}
			if err := job.SetResult(strings.Repeat("x", runtime.MaxResultBytes)); err == nil {
				return errors.New("SetResult accepted a result over MaxResultBytes")
			}
			return job.SetResult(map[string]string{"s": "fine"})
		},
	}, runtime.Registration{
		Kind:    "innocent",
		Handler: func(ctx context.Context, job *runtime.Job) error { return nil },
	})
	tx, err := b.pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	bad := enqueue(t, tx, "nul-error", map[string]int{})
	res := enqueue(t, tx, "nul-result", map[string]int{})
	ok := enqueue(t, tx, "innocent", map[string]int{})
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	j := b.waitStatus(t, bad, 10*time.Second, testdb.PgtaskJobStatusFailed)
	if e := errorsOf(t, j); j.Attempts != 1 || len(e) != 1 || e[0].Error != `bad byte \x00 here` {
		t.Fatalf("attempts=%d errors=%s; want one attempt (NoRetry) with its text", j.Attempts, j.Errors)
	}
	r := b.waitStatus(t, res, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	if string(r.Result) != `{"s": "fine"}` || r.Attempts != 1 {
		t.Fatalf("result %s after %d attempts", r.Result, r.Attempts)
	}
	if o := b.waitStatus(t, ok, 10*time.Second, testdb.PgtaskJobStatusSucceeded); o.Attempts != 1 {
		t.Fatalf("the batch's other job took %d attempts", o.Attempts)
	}
}

// The start log says each queue's mode, whether configured or taken from
// its kinds.
func TestStartLogSaysEachQueuesMode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logs := &recordedLogs{}
	startWorker(t, b.url, runtime.Config{Logger: slog.New(logs), Queues: map[string]runtime.QueueConfig{
		runtime.DefaultQueue: {}, "long": {Concurrency: 1}, "held": {Mode: runtime.ModeHeld, Concurrency: 1},
	}}, runtime.Registration{
		Kind: "slow", Queue: "long", Mode: runtime.ModeLease, Handler: func(context.Context, *runtime.Job) error { return nil },
	})
	waitFor(t, 5*time.Second, "the start log", func() bool { return logs.has("pgtask worker starting") })
	logs.mu.Lock()
	defer logs.mu.Unlock()
	for _, r := range logs.records {
		if r.Message != "pgtask worker starting" {
			continue
		}
		var queues string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "queues" {
				queues = a.Value.String()
			}
			return true
		})
		if want := "[default (held) held (held) long (lease)]"; queues != want {
			t.Errorf("queues=%s, want %s", queues, want)
		}
	}
}
