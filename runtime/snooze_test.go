package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// snoozeModes are the ways a queue runs snoozing jobs: held one job per
// transaction, held in batches (a snooze behind its savepoint, among
// others that commit), and leased.
var snoozeModes = []struct {
	name  string
	queue runtime.QueueConfig
	batch bool // start the worker with startBatching
}{
	{"held", runtime.QueueConfig{Concurrency: 4, BatchSize: 1}, false},
	{"held-batch", runtime.QueueConfig{Concurrency: 2, BatchSize: 8}, true},
	{"lease", runtime.QueueConfig{Mode: runtime.ModeLease, Concurrency: 8}, false},
}

func startSnoozing(t *testing.T, url string, queue runtime.QueueConfig, batch bool, reg runtime.Registration) {
	t.Helper()
	cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: queue}}
	if batch {
		startBatching(t, url, cfg, reg)
		return
	}
	startWorker(t, url, cfg, reg)
}

func TestSnoozeIsAnErrorValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want time.Duration
	}{
		{runtime.Snooze(time.Minute), time.Minute},
		{runtime.Snooze(0), 0},
		{runtime.Snooze(-time.Hour), 0},
		{fmt.Errorf("file not uploaded yet: %w", runtime.Snooze(time.Second)), time.Second},
	} {
		var se *runtime.SnoozeError
		if !errors.As(tc.err, &se) || se.Delay != tc.want {
			t.Errorf("%v: errors.As finds %+v, want a SnoozeError of %s", tc.err, se, tc.want)
		}
	}
}

// Several workers of each mode race over many jobs that snooze k times
// (with delays of zero, below zero, and a little, some wrapped) and then
// succeed: every job ends succeeded after one attempt with k snoozes, no
// error recorded, its handler never running twice at once, and only the
// writes of its successful run kept.
func TestSnoozeSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const jobs, k = 120, 3
	var mu sync.Mutex
	runs := map[runtime.JobID]int{}
	running := map[runtime.JobID]bool{}
	var overlaps, badAttempts int
	reg := runtime.Registration{Kind: "wait_upload", Backoff: fastRetry, Handler: func(ctx context.Context, job *runtime.Job) error {
		mu.Lock()
		if running[job.ID] {
			overlaps++
		}
		running[job.ID] = true
		runs[job.ID]++
		n := runs[job.ID]
		if job.Attempt != 1 {
			badAttempts++
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			running[job.ID] = false
			mu.Unlock()
		}()
		// A write through the job's transaction: kept only with a success.
		payload := fmt.Appendf(nil, `{"job": %d, "run": %d}`, job.ID, n)
		if _, err := runtime.Enqueue(ctx, job.Tx(), runtime.EnqueueRequest{Kind: "marker", Payload: payload,
			EnqueueOptions: runtime.EnqueueOptions{Queue: "markers"}}); err != nil {
			return err
		}
		if n > k {
			return nil
		}
		switch job.ID % 3 {
		case 0:
			return runtime.Snooze(0)
		case 1:
			return runtime.Snooze(-time.Second)
		default:
			return fmt.Errorf("not uploaded yet: %w", runtime.Snooze(5*time.Millisecond))
		}
	}}
	for _, m := range snoozeModes {
		startSnoozing(t, b.url, m.queue, m.batch, reg)
		startSnoozing(t, b.url, m.queue, m.batch, reg)
	}
	reqs := make([]runtime.EnqueueRequest, jobs)
	for i := range reqs {
		reqs[i] = runtime.EnqueueRequest{Kind: "wait_upload", Payload: []byte(`{}`), EnqueueOptions: runtime.EnqueueOptions{MaxAttempts: 2}}
	}
	if _, err := runtime.EnqueueMany(context.Background(), b.pool, reqs); err != nil {
		t.Fatal(err)
	}
	done := b.waitQueueDone(t, runtime.DefaultQueue, 60*time.Second)
	if len(done) != jobs {
		t.Fatalf("%d jobs, want %d", len(done), jobs)
	}
	for _, j := range done {
		if j.Status != testdb.PgtaskJobStatusSucceeded || j.Attempts != 1 || j.Snoozes != k || string(j.Errors) != "[]" {
			t.Errorf("job %d: %s, attempts %d, snoozes %d, errors %s; want succeeded, attempts 1, snoozes %d, no errors",
				j.ID, j.Status, j.Attempts, j.Snoozes, j.Errors, k)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != k+1 {
			t.Errorf("job %d ran %d times, want %d", id, n, k+1)
		}
	}
	if overlaps != 0 || badAttempts != 0 {
		t.Errorf("%d runs overlapped another of the same job, %d ran as an attempt other than 1", overlaps, badAttempts)
	}
	markers, err := b.q.ListJobs(context.Background(), "markers")
	if err != nil {
		t.Fatal(err)
	}
	if len(markers) != jobs {
		t.Errorf("%d writes kept, want %d: one per job, from its successful run (a snooze's writes are rolled back)", len(markers), jobs)
	}
	for _, m := range markers {
		var p struct{ Run int }
		if err := json.Unmarshal(m.Payload, &p); err != nil || p.Run != k+1 {
			t.Errorf("kept a write of run %d (%v), want only run %d's", p.Run, err, k+1)
		}
	}
}

// A job that snoozes past its kind's cap fails for good, with an error
// saying so, its attempt still its first.
func TestSnoozePastTheCapFailsTheJob(t *testing.T) {
	for _, m := range snoozeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var mu sync.Mutex
			runs := 0
			startSnoozing(t, b.url, m.queue, m.batch, runtime.Registration{Kind: "never_ready", MaxSnoozes: 2,
				Handler: func(context.Context, *runtime.Job) error {
					mu.Lock()
					runs++
					mu.Unlock()
					return runtime.Snooze(time.Millisecond)
				}})
			id := enqueue(t, b.pool, "never_ready", map[string]int{})
			j := b.waitStatus(t, id, 20*time.Second, testdb.PgtaskJobStatusFailed)
			errs := errorsOf(t, j)
			if j.Attempts != 1 || j.Snoozes != 3 || len(errs) != 1 || errs[0].Error != "snoozed 3 times, cap 2" || errs[0].Attempt != 1 {
				t.Fatalf("job: attempts %d, snoozes %d, errors %s; want attempts 1, snoozes 3 and one error \"snoozed 3 times, cap 2\"",
					j.Attempts, j.Snoozes, j.Errors)
			}
			mu.Lock()
			n := runs
			mu.Unlock()
			if n != 3 {
				t.Fatalf("the handler ran %d times, want 3 (two snoozes, and the one past the cap)", n)
			}
			// An operator's retry starts the count again.
			if ok, err := runtime.RetryJob(context.Background(), b.pool, id); !ok || err != nil {
				t.Fatalf("RetryJob: %v, %v", ok, err)
			}
			j = b.waitStatus(t, id, 20*time.Second, testdb.PgtaskJobStatusFailed)
			if j.Snoozes != 3 || j.Attempts != 1 {
				t.Fatalf("after a retry: attempts %d, snoozes %d; want 1 and 3 again", j.Attempts, j.Snoozes)
			}
		})
	}
}

// A grouped job that snoozes stays its group's head: the jobs behind it
// start only once it has succeeded, in every mode, with several workers
// racing for the group.
func TestSnoozedJobKeepsItsGroupWaiting(t *testing.T) {
	for _, m := range snoozeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var mu sync.Mutex
			var events []string
			reg := runtime.Registration{Kind: "step", Handler: func(ctx context.Context, job *runtime.Job) error {
				p, err := runtime.DecodePayload[struct{ Name string }](job)
				if err != nil {
					return err
				}
				mu.Lock()
				events = append(events, p.Name)
				n := 0
				for _, e := range events {
					if e == p.Name {
						n++
					}
				}
				mu.Unlock()
				if p.Name == "head" && n <= 3 {
					return runtime.Snooze(20 * time.Millisecond)
				}
				return nil
			}}
			for range 3 {
				startSnoozing(t, b.url, m.queue, m.batch, reg)
			}
			ctx := context.Background()
			var reqs []runtime.EnqueueRequest
			for _, name := range []string{"head", "second", "third"} {
				req := runtime.EnqueueRequest{Kind: "step", Payload: mustJSON(t, map[string]string{"Name": name})}
				req.Apply(runtime.WithGroup("g"))
				reqs = append(reqs, req)
			}
			ids, err := runtime.EnqueueMany(ctx, b.pool, reqs)
			if err != nil {
				t.Fatal(err)
			}
			b.waitStatus(t, ids[2], 20*time.Second, testdb.PgtaskJobStatusSucceeded)
			mu.Lock()
			got := fmt.Sprint(events)
			mu.Unlock()
			if want := "[head head head head second third]"; got != want {
				t.Fatalf("runs %s, want %s: nothing behind a snoozed head starts", got, want)
			}
			if j := b.job(t, ids[0]); j.Attempts != 1 || j.Snoozes != 3 {
				t.Fatalf("head: attempts %d, snoozes %d; want 1 and 3", j.Attempts, j.Snoozes)
			}
		})
	}
}

// A snooze gives its attempt back, so the job's next claim has the same
// attempt number: a snooze's record sent again (its reply was lost) after
// that claim is refused, by the claim's token, and leaves the running
// attempt alone.
func TestResentSnoozeIsRefusedByTheNextClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := idleWorker(t, b.url, runtime.Config{})
	if err := w.Register(runtime.Registration{Kind: "wait", Handler: func(context.Context, *runtime.Job) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	id := enqueue(t, b.pool, "wait", map[string]int{})
	claim := func(token int64) int32 {
		t.Helper()
		rows, err := b.gen.ClaimLeasedJobs(ctx, gen.ClaimLeasedJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: w.ID(), LeaseMs: 600_000, Token: token})
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim: %d rows, %v; want the job", len(rows), err)
		}
		return rows[0].Attempts
	}
	attempt := claim(101)
	if n, err := w.SettleSnooze(ctx, int64(id), attempt, 101, 0); n != 1 || err != nil {
		t.Fatalf("snooze: recorded %d, %v; want it recorded", n, err)
	}
	if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusQueued || j.Attempts != 0 || j.Snoozes != 1 {
		t.Fatalf("after the snooze: %s, attempts %d, snoozes %d; want queued, 0, 1", j.Status, j.Attempts, j.Snoozes)
	}
	if again := claim(202); again != attempt {
		t.Fatalf("the next claim is attempt %d, want %d again", again, attempt)
	}
	if n, err := w.SettleSnooze(ctx, int64(id), attempt, 101, 0); n != 0 || err != nil {
		t.Fatalf("the snooze sent again: recorded %d, %v; want it refused", n, err)
	}
	if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusStarted || j.Attempts != 1 || j.Snoozes != 1 || j.StaleOutcomes != 1 {
		t.Fatalf("after the resent snooze: %s, attempts %d, snoozes %d, stale outcomes %d; want started, 1, 1, 1",
			j.Status, j.Attempts, j.Snoozes, j.StaleOutcomes)
	}
	// The running claim's own snooze is recorded.
	if n, err := w.SettleSnooze(ctx, int64(id), attempt, 202, time.Hour); n != 1 || err != nil {
		t.Fatalf("the current claim's snooze: recorded %d, %v", n, err)
	}
	if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusScheduled || j.Attempts != 0 || j.Snoozes != 2 {
		t.Fatalf("after its snooze: %s, attempts %d, snoozes %d; want scheduled, 0, 2", j.Status, j.Attempts, j.Snoozes)
	}
}

// A handler sees how often its job snoozed so far and its task's cap
// (Job.Snoozes, Job.MaxSnoozes), in every mode, with several workers
// racing for the job.
func TestJobShowsItsSnoozes(t *testing.T) {
	for _, m := range snoozeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var mu sync.Mutex
			var seen []string
			regs := []runtime.Registration{
				{Kind: "capped", MaxSnoozes: 7},
				{Kind: "uncapped"},
			}
			for i := range regs {
				regs[i].Handler = func(_ context.Context, job *runtime.Job) error {
					mu.Lock()
					seen = append(seen, fmt.Sprintf("%s %d/%d", job.Kind, job.Snoozes, job.MaxSnoozes))
					mu.Unlock()
					if job.Snoozes < 3 {
						return runtime.Snooze(0)
					}
					return nil
				}
			}
			cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: m.queue}}
			for range 2 {
				if m.batch {
					startBatching(t, b.url, cfg, regs...)
				} else {
					startWorker(t, b.url, cfg, regs...)
				}
			}
			capped := enqueue(t, b.pool, "capped", map[string]int{})
			b.waitStatus(t, capped, 20*time.Second, testdb.PgtaskJobStatusSucceeded)
			uncapped := enqueue(t, b.pool, "uncapped", map[string]int{})
			b.waitStatus(t, uncapped, 20*time.Second, testdb.PgtaskJobStatusSucceeded)
			mu.Lock()
			got := fmt.Sprint(seen)
			mu.Unlock()
			d := runtime.DefaultMaxSnoozes
			want := fmt.Sprintf("[capped 0/7 capped 1/7 capped 2/7 capped 3/7 uncapped 0/%d uncapped 1/%d uncapped 2/%d uncapped 3/%d]", d, d, d, d)
			if got != want {
				t.Fatalf("handlers saw %s, want %s", got, want)
			}
		})
	}
}

// An operator cancels a running job whose handler then snoozes: the job
// ends cancelled, and its error history holds the attempt's error as any
// failure's entry does, nothing of how the snooze was recorded (its cap,
// its claim's token).
func TestCancelledSnoozeStoresAPlainEntry(t *testing.T) {
	for _, m := range snoozeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			started := make(chan struct{}, 1)
			startSnoozing(t, b.url, m.queue, m.batch, runtime.Registration{Kind: "doze", Handler: func(ctx context.Context, _ *runtime.Job) error {
				started <- struct{}{}
				<-ctx.Done()
				return runtime.Snooze(time.Minute)
			}})
			id := enqueue(t, b.pool, "doze", map[string]int{})
			select {
			case <-started:
			case <-time.After(20 * time.Second):
				t.Fatal("the handler did not start")
			}
			if ok, err := runtime.CancelJob(context.Background(), b.pool, id); !ok || err != nil {
				t.Fatalf("CancelJob: %v, %v", ok, err)
			}
			j := b.waitStatus(t, id, 20*time.Second, testdb.PgtaskJobStatusCancelled)
			var entries []map[string]json.RawMessage
			if err := json.Unmarshal(j.Errors, &entries); err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 {
				t.Fatalf("errors %s, want one entry", j.Errors)
			}
			for k := range entries[0] {
				if k != "attempt" && k != "error" && k != "at" {
					t.Errorf("the entry has member %q: %s; want attempt, error and at only", k, j.Errors)
				}
			}
			if j.Snoozes != 0 || j.Attempts != 1 {
				t.Errorf("job: attempts %d, snoozes %d; want 1 and 0 (the cancel won over the snooze)", j.Attempts, j.Snoozes)
			}
		})
	}
}

// The snooze that takes a job past its cap fails it, and the worker says
// so as it says of any final failure, at ERROR; the snoozes before it are
// logged at DEBUG as snoozes.
func TestSnoozePastTheCapIsLoggedAsAFailure(t *testing.T) {
	for _, m := range snoozeModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			logs := &recordedLogs{}
			cfg := runtime.Config{Logger: slog.New(logs), Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: m.queue}}
			reg := runtime.Registration{Kind: "insomniac", MaxSnoozes: 1, Handler: func(context.Context, *runtime.Job) error {
				return runtime.Snooze(0)
			}}
			if m.batch {
				startBatching(t, b.url, cfg, reg)
			} else {
				startWorker(t, b.url, cfg, reg)
			}
			id := enqueue(t, b.pool, "insomniac", map[string]int{})
			b.waitStatus(t, id, 20*time.Second, testdb.PgtaskJobStatusFailed)
			const final = "pgtask: job snoozed past its cap on snoozes; it failed"
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if _, ok := logs.levelOf(final); ok {
					break
				}
			}
			for msg, want := range map[string]slog.Level{
				"pgtask: job snoozed": slog.LevelDebug,
				final:                 slog.LevelError,
			} {
				if got, ok := logs.levelOf(msg); !ok || got != want {
					t.Errorf("%q logged at %v (found %v), want %v", msg, got, ok, want)
				}
			}
		})
	}
}
