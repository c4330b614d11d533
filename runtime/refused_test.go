package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// nested is a JSON value nested depth arrays deep.
func nested(depth int) any {
	var v any = 1
	for range depth {
		v = []any{v}
	}
	return v
}

// JSON nested deeper than MaxJSONDepth is refused before anything is sent,
// as a result and as a payload: the server would refuse it only once it
// runs out of stack, and a result it refuses cannot be recorded.
func TestDeepJSONIsRefusedBeforeAnythingIsSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	deep := nested(runtime.MaxJSONDepth + 1)
	err := (&runtime.Job{ID: 7}).SetResult(deep)
	if err == nil || !strings.Contains(err.Error(), "nested") {
		t.Fatalf("SetResult of JSON nested %d deep: %v, want an error saying it is nested too deep", runtime.MaxJSONDepth+1, err)
	}
	if err := (&runtime.Job{ID: 7}).SetResult(nested(runtime.MaxJSONDepth - 1)); err != nil {
		t.Fatalf("SetResult of JSON nested %d deep: %v", runtime.MaxJSONDepth-1, err)
	}
	payload := mustJSON(t, map[string]any{"deep": deep})
	_, err = runtime.Enqueue(context.Background(), b.pool, runtime.EnqueueRequest{Kind: "deep", Payload: payload})
	var pgErr *pgconn.PgError
	if err == nil || errors.As(err, &pgErr) || !strings.Contains(err.Error(), "nested") {
		t.Fatalf("Enqueue of a payload nested %d deep: %v, want an error saying it is nested too deep", runtime.MaxJSONDepth+2, err)
	}
	if jobs, err := b.q.ListJobs(context.Background(), runtime.DefaultQueue); err != nil || len(jobs) != 0 {
		t.Fatalf("jobs after the refused enqueue: %d, %v", len(jobs), err)
	}
}

// refusedDepth is how deep a result is nested that passes SetResult's
// check but that a server with a small stack (see smallStack) refuses.
const refusedDepth = runtime.MaxJSONDepth - 1

// smallStack is b's database URL for sessions whose max_stack_depth is the
// least PostgreSQL allows: they refuse JSON nested refusedDepth deep. It
// checks that they do.
func smallStack(t *testing.T, b *bundle) string {
	t.Helper()
	small := withSetting(t, b, "max_stack_depth=100kB")
	pool, err := pgxpool.New(context.Background(), small)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, err = testdb.New(pool).ParseJSONB(context.Background(), string(mustJSON(t, nested(refusedDepth))))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "54001" {
		t.Fatalf("a session with a small stack parsed JSON nested %d deep: %v, want SQLSTATE 54001", refusedDepth, err)
	}
	return small
}

// withSetting is b's database URL for sessions with setting (name=value).
func withSetting(t *testing.T, b *bundle, setting string) string {
	t.Helper()
	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("options", "-c "+setting)
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

// A lease-mode outcome whose record waits on a lock past the worker's
// lock_timeout is not refused: the worker records it again once the lock
// is gone, and the job succeeds in its one attempt.
func TestLeaseRecordsAgainAnOutcomeALockTimeoutStopped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	release := make(chan struct{})
	running := make(chan struct{}, 1)
	waits := runtime.Registration{Kind: "waits", Handler: func(ctx context.Context, job *runtime.Job) error {
		running <- struct{}{}
		<-release
		return job.SetResult("ok")
	}}
	startWorker(t, withSetting(t, b, "lock_timeout=50ms"), leaseConfig(1), waits)
	id := enqueue(t, b.pool, "waits", map[string]int{}, runtime.WithMaxAttempts(1))
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not start")
	}
	// Another session holds the job's row while the outcome comes in (the
	// update is rolled back).
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // rolled back below
	if n, err := testdb.New(tx).ExpireLease(ctx, int64(id)); err != nil || n != 1 {
		t.Fatalf("lock the job's row: %d rows, %v", n, err)
	}
	close(release)
	time.Sleep(time.Second) // the worker's records wait out their lock_timeout meanwhile
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	j := b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded, testdb.PgtaskJobStatusFailed)
	if j.Status != testdb.PgtaskJobStatusSucceeded || j.Attempts != 1 || string(j.Result) != `"ok"` || len(errorsOf(t, j)) != 0 {
		t.Fatalf("job: %s, attempts %d, result %s, errors %s", j.Status, j.Attempts, j.Result, j.Errors)
	}
}

// outcomeKinds registers "outcome": a job whose payload says deep sets a
// result the small-stack server refuses; one whose payload says write
// enqueues a "marker" job through Job.Tx. Markers succeed. started, unless
// nil, is told of each attempt as it starts. Retries wait little.
func outcomeKinds(started func(*runtime.Job)) []runtime.Registration {
	type payload struct {
		Deep      bool `json:"deep"`
		DeepFirst bool `json:"deep_first"` // deep in the first attempt only
		Write     bool `json:"write"`
	}
	return []runtime.Registration{
		{Kind: "outcome", Backoff: fastRetry, Handler: func(ctx context.Context, job *runtime.Job) error {
			if started != nil {
				started(job)
			}
			p, err := runtime.DecodePayload[payload](job)
			if err != nil {
				return err
			}
			if p.Write {
				if _, err := runtime.Enqueue(ctx, job.Tx(), runtime.EnqueueRequest{Kind: "marker", Payload: []byte(`{}`),
					EnqueueOptions: runtime.EnqueueOptions{Metadata: map[string]string{"from": fmt.Sprint(job.ID)}}}); err != nil {
					return err
				}
			}
			if p.Deep || (p.DeepFirst && job.Attempt == 1) {
				return job.SetResult(nested(refusedDepth))
			}
			return job.SetResult("ok")
		}},
		{Kind: "marker", Handler: func(context.Context, *runtime.Job) error { return nil }},
	}
}

// testRefusedOutcomeIsIsolated runs, on a server that refuses one job's
// result, that job among good ones, and then more: the good ones succeed
// (with their writes, when goodWrites), the refused one fails at once, for
// good (it has one attempt), saying what the server refused, and the queue
// goes on.
func testRefusedOutcomeIsIsolated(t *testing.T, cfg runtime.Config, goodWrites, badWrites bool) {
	b := setup(t)
	small := smallStack(t, b)
	var good []runtime.JobID
	for range 3 {
		good = append(good, enqueue(t, b.pool, "outcome", map[string]bool{"write": goodWrites}, runtime.WithMaxAttempts(1)))
	}
	// Between good jobs, so its batch has some on either side.
	bad := enqueue(t, b.pool, "outcome", map[string]bool{"deep": true, "write": badWrites}, runtime.WithMaxAttempts(1))
	good = append(good, enqueue(t, b.pool, "outcome", map[string]bool{"write": goodWrites}, runtime.WithMaxAttempts(1)))
	startBatching(t, small, cfg, outcomeKinds(nil)...)

	j := b.waitStatus(t, bad, 15*time.Second, testdb.PgtaskJobStatusFailed)
	if e := errorsOf(t, j); len(e) != 1 || j.Attempts != 1 ||
		!strings.Contains(e[0].Error, "the database refused to record the attempt's outcome") ||
		!strings.Contains(e[0].Error, "stack depth limit exceeded") {
		t.Errorf("the refused job: attempts %d, errors %s", j.Attempts, j.Errors)
	}
	// Jobs enqueued afterwards run too.
	for range 5 {
		good = append(good, enqueue(t, b.pool, "outcome", map[string]bool{"write": goodWrites}, runtime.WithMaxAttempts(1)))
	}
	jobs := b.waitQueueDone(t, runtime.DefaultQueue, 15*time.Second)
	markers := map[string]int{}
	for _, job := range jobs {
		if job.Kind == "marker" {
			var m map[string]string
			if err := json.Unmarshal(job.Metadata, &m); err != nil {
				t.Fatal(err)
			}
			markers[m["from"]]++
		}
	}
	wantMarkers := 0
	if goodWrites {
		wantMarkers = 1
	}
	for _, id := range good {
		j := b.job(t, id)
		if j.Status != testdb.PgtaskJobStatusSucceeded || j.Attempts != 1 || string(j.Result) != `"ok"` ||
			markers[fmt.Sprint(id)] != wantMarkers {
			t.Errorf("good job %d: %s, attempts %d, result %s, %d markers, errors %s",
				id, j.Status, j.Attempts, j.Result, markers[fmt.Sprint(id)], j.Errors)
		}
	}
	if n := markers[fmt.Sprint(bad)]; n != 0 {
		t.Errorf("the refused job's write committed %d times", n)
	}
}

func TestHeldIsolatesAnOutcomeTheDatabaseRefuses(t *testing.T) {
	t.Parallel()
	cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{
		runtime.DefaultQueue: {Concurrency: 1, BatchSize: 10},
	}}
	t.Run("the refused job wrote nothing", func(t *testing.T) {
		t.Parallel()
		testRefusedOutcomeIsIsolated(t, cfg, true, false)
	})
	t.Run("the refused job wrote", func(t *testing.T) {
		t.Parallel()
		testRefusedOutcomeIsIsolated(t, cfg, true, true)
	})
	t.Run("only the refused job wrote", func(t *testing.T) {
		t.Parallel()
		testRefusedOutcomeIsIsolated(t, cfg, false, true)
	})
	t.Run("one job a batch", func(t *testing.T) {
		t.Parallel()
		testRefusedOutcomeIsIsolated(t, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {BatchSize: 1}}}, true, true)
	})
}

// markersOf counts the marker jobs among jobs by the job that wrote them.
func markersOf(t *testing.T, jobs []testdb.PgtaskJob) map[runtime.JobID]int {
	t.Helper()
	markers := map[runtime.JobID]int{}
	for _, job := range jobs {
		if job.Kind != "marker" {
			continue
		}
		var m map[string]string
		if err := json.Unmarshal(job.Metadata, &m); err != nil {
			t.Fatal(err)
		}
		var from int64
		if _, err := fmt.Sscan(m["from"], &from); err != nil {
			t.Fatalf("marker %d from %q: %v", job.ID, m["from"], err)
		}
		markers[runtime.JobID(from)]++
	}
	return markers
}

// A held batch's refused job that wrote takes the writes of the jobs that
// wrote with it down with its transaction, each time it is refused: those
// run again, their rolled-back attempts not counted, while the refused job
// spends its own attempts, so that it ends failed for good within them and
// the others succeed.
func TestHeldRefusedJobSpendsItsOwnAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	small := smallStack(t, b)
	var mu sync.Mutex
	runs := map[runtime.JobID]int{}
	var good []runtime.JobID
	for range 4 {
		good = append(good, enqueue(t, b.pool, "outcome", map[string]bool{"write": true}, runtime.WithMaxAttempts(1)))
	}
	bad := enqueue(t, b.pool, "outcome", map[string]bool{"deep": true, "write": true}, runtime.WithMaxAttempts(3))
	for range 4 {
		good = append(good, enqueue(t, b.pool, "outcome", map[string]bool{"write": true}, runtime.WithMaxAttempts(1)))
	}
	cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 1, BatchSize: 10}}}
	startBatching(t, small, cfg, outcomeKinds(func(job *runtime.Job) {
		mu.Lock()
		runs[job.ID]++
		mu.Unlock()
	})...)
	j := b.waitStatus(t, bad, 15*time.Second, testdb.PgtaskJobStatusFailed)
	if e := errorsOf(t, j); j.Attempts != 3 || len(e) != 3 {
		t.Errorf("the refused job: attempts %d, errors %s; want 3 of each", j.Attempts, j.Errors)
	}
	markers := markersOf(t, b.waitQueueDone(t, runtime.DefaultQueue, 15*time.Second))
	for _, id := range good {
		j := b.job(t, id)
		if j.Status != testdb.PgtaskJobStatusSucceeded || j.Attempts != 1 || markers[id] != 1 {
			t.Errorf("good job %d: %s, attempts %d, %d markers, errors %s", id, j.Status, j.Attempts, markers[id], j.Errors)
		}
	}
	if markers[bad] != 0 {
		t.Errorf("the refused job's write committed %d times", markers[bad])
	}
	mu.Lock()
	defer mu.Unlock()
	if runs[bad] != 3 {
		t.Errorf("the refused job ran %d times, want 3", runs[bad])
	}
	if runs[good[0]] < 2 {
		t.Errorf("the first good job ran %d times: it was not in the refused job's batch", runs[good[0]])
	}
}

// In a held batch whose refused job wrote, a group's job that wrote runs
// again: the job behind it in its group, which wrote nothing, is not
// recorded before it, but runs again after it.
func TestHeldRefusedBatchKeepsGroupOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	small := smallStack(t, b)
	var mu sync.Mutex
	var starts []runtime.JobID
	head := enqueue(t, b.pool, "outcome", map[string]bool{"write": true}, runtime.WithGroup("g"), runtime.WithMaxAttempts(1))
	next := enqueue(t, b.pool, "outcome", map[string]bool{}, runtime.WithGroup("g"), runtime.WithMaxAttempts(1))
	bad := enqueue(t, b.pool, "outcome", map[string]bool{"deep": true, "write": true}, runtime.WithMaxAttempts(1))
	cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 1, BatchSize: 10}}}
	startBatching(t, small, cfg, outcomeKinds(func(job *runtime.Job) {
		mu.Lock()
		starts = append(starts, job.ID)
		mu.Unlock()
	})...)
	b.waitStatus(t, bad, 15*time.Second, testdb.PgtaskJobStatusFailed)
	markers := markersOf(t, b.waitQueueDone(t, runtime.DefaultQueue, 15*time.Second))
	for _, id := range []runtime.JobID{head, next} {
		if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusSucceeded || j.Attempts != 1 {
			t.Errorf("job %d: %s, attempts %d, errors %s", id, j.Status, j.Attempts, j.Errors)
		}
	}
	if markers[head] != 1 {
		t.Errorf("the group's head wrote %d markers, want 1", markers[head])
	}
	mu.Lock()
	defer mu.Unlock()
	lastHead, lastNext := -1, -1
	for i, id := range starts {
		switch id {
		case head:
			lastHead = i
		case next:
			lastNext = i
		}
	}
	if lastHead < 0 || lastNext < lastHead {
		t.Errorf("starts %v: the group's second job's recorded attempt started before its head's (%d, %d)", starts, head, next)
	}
}

func TestLeaseIsolatesAnOutcomeTheDatabaseRefuses(t *testing.T) {
	t.Parallel()
	testRefusedOutcomeIsIsolated(t, leaseConfig(4), true, false)
}

// A lease-mode run whose head's success the server refuses, after the jobs
// behind it in its group ran: the head waits for its retry, and those jobs
// are not recorded before it; they are handed back, their attempts not
// counted and their writes through Job.Tx not kept, and run again after
// the head's retry succeeded. Nothing is lost.
func TestLeaseRefusedHeadKeepsGroupOrder(t *testing.T) {
	t.Parallel()
	t.Run("the jobs behind it write nothing", func(t *testing.T) {
		t.Parallel()
		testLeaseRefusedHeadKeepsGroupOrder(t, false)
	})
	t.Run("the jobs behind it write", func(t *testing.T) {
		t.Parallel()
		testLeaseRefusedHeadKeepsGroupOrder(t, true)
	})
}

func testLeaseRefusedHeadKeepsGroupOrder(t *testing.T, write bool) {
	b := setup(t)
	small := smallStack(t, b)
	type start struct {
		id      runtime.JobID
		attempt int
	}
	var mu sync.Mutex
	var starts []start
	// One claim takes the four, as a run.
	head := enqueue(t, b.pool, "outcome", map[string]bool{"deep_first": true}, runtime.WithGroup("g"), runtime.WithMaxAttempts(3))
	var behind []runtime.JobID
	for range 3 {
		behind = append(behind, enqueue(t, b.pool, "outcome", map[string]bool{"write": write}, runtime.WithGroup("g"), runtime.WithMaxAttempts(3)))
	}
	startWorker(t, small, leaseConfig(4), outcomeKinds(func(job *runtime.Job) {
		mu.Lock()
		starts = append(starts, start{job.ID, job.Attempt})
		mu.Unlock()
	})...)
	markers := markersOf(t, b.waitQueueDone(t, runtime.DefaultQueue, 15*time.Second))
	if j := b.job(t, head); j.Status != testdb.PgtaskJobStatusSucceeded || j.Attempts != 2 || len(errorsOf(t, j)) != 1 {
		t.Errorf("the head: %s, attempts %d, errors %s; want succeeded in its second attempt", j.Status, j.Attempts, j.Errors)
	}
	wantMarkers := 0
	if write {
		wantMarkers = 1
	}
	for _, id := range behind {
		if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusSucceeded || j.Attempts != 1 || len(errorsOf(t, j)) != 0 ||
			markers[id] != wantMarkers {
			t.Errorf("job %d behind the head: %s, attempts %d, %d markers, errors %s", id, j.Status, j.Attempts, markers[id], j.Errors)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// The last start of each job is the attempt recorded: in group order.
	last := map[runtime.JobID]int{}
	for i, s := range starts {
		last[s.id] = i
	}
	order := append([]runtime.JobID{head}, behind...)
	for i := 1; i < len(order); i++ {
		if last[order[i]] < last[order[i-1]] {
			t.Errorf("starts %v: job %d's recorded attempt started before job %d's", starts, order[i], order[i-1])
		}
	}
	if i := slices.Index(starts, start{head, 2}); i < 0 || !slices.ContainsFunc(starts[:i], func(s start) bool { return s.id != head }) {
		// Only a descheduled run gets here: the jobs behind the head start
		// as soon as its outcome is out, while the refusal takes the loop
		// two round trips to find.
		t.Logf("starts %v: no job behind the head ran before its retry; this time the refusal did not meet a run", starts)
	}
}

// A lease-mode attempt that fails after its job was taken over and run
// again: its outcome is refused, and the log says so rather than that the
// attempt will be retried.
func TestLeaseLogsALateOutcomeAsRefusedByTheTakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	release := make(chan struct{})
	running := make(chan struct{}, 1)
	returned := make(chan struct{})
	hung := runtime.Registration{Kind: "hangs", Handler: func(ctx context.Context, job *runtime.Job) error {
		if job.Attempt > 1 {
			return nil
		}
		running <- struct{}{}
		<-release
		defer close(returned)
		return errors.New("late failure")
	}}
	cfg := leaseConfig(4, time.Hour) // only the test makes the lease run out
	logs := &recordedLogs{}
	stale := cfg
	stale.Logger = slog.New(logs)
	startWorker(t, b.url, stale, hung)
	id := enqueue(t, b.pool, "hangs", map[string]int{}, runtime.WithMaxAttempts(5))
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not start")
	}
	if n, err := b.q.ExpireLease(ctx, int64(id)); err != nil || n != 1 {
		t.Fatalf("expire the lease: %d rows, %v", n, err)
	}
	startWorker(t, b.url, cfg, hung)
	b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	close(release)
	<-returned
	deadline := time.Now().Add(10 * time.Second)
	for b.job(t, id).StaleOutcomes == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the late outcome was not refused")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The log follows the refusal's commit.
	for !logs.has("pgtask: job attempt's outcome refused: the job was taken over") {
		if time.Now().After(deadline) {
			t.Fatal("the refused late outcome was not logged as refused")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if logs.has("pgtask: job attempt failed; it will be retried") {
		t.Error("the refused late outcome was logged as an attempt that will be retried")
	}
	if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusSucceeded || j.Attempts != 2 {
		t.Fatalf("job after the late outcome: %s, attempts %d", j.Status, j.Attempts)
	}
}

// refusedLogs are the records of logs at Warn or above that say an outcome
// was refused or that an attempt failed.
func (l *recordedLogs) refusedOrFailed() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.records {
		if r.Level >= slog.LevelWarn && (strings.Contains(r.Message, "refused") || strings.Contains(r.Message, "failed")) {
			out = append(out, r.Message)
		}
	}
	return out
}

// A worker that lost its reply after its commit went through records the
// outcome again and is refused: what it logs is what the job's row says,
// a success, not a failure or a takeover.
func TestAnOutcomeSentAgainAfterItsCommitIsLoggedAsRecorded(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			logs := &recordedLogs{}
			w := idleWorker(t, b.url, runtime.Config{Logger: slog.New(logs)})
			if err := w.Register(runtime.Registration{Kind: "ok", Handler: func(context.Context, *runtime.Job) error { return nil }}); err != nil {
				t.Fatal(err)
			}
			id := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithMaxAttempts(5))
			if _, err := w.WorkOne(ctx); err != nil {
				t.Fatal(err)
			}
			if mode == runtime.ModeHeld {
				err := w.SettleAfterLostReply(ctx, int64(id))
				if err != nil {
					t.Fatal(err)
				}
				if !logs.has("pgtask: job succeeded; its commit went through before the worker lost its reply") {
					t.Error("the success whose reply was lost was not logged as a success")
				}
			} else if err := w.ResendLeaseOutcome(ctx, int64(id)); err != nil {
				t.Fatal(err)
			}
			if got := logs.refusedOrFailed(); len(got) > 0 {
				t.Errorf("a success recorded before its reply was lost was logged as %q", got)
			}
			if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusSucceeded || j.Attempts != 1 || len(errorsOf(t, j)) != 0 {
				t.Fatalf("job: %s, attempts %d, errors %s", j.Status, j.Attempts, j.Errors)
			}
		})
	}
}
