package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// cancellable is a handler that reports each attempt it starts on started
// and then waits for its context, returning its error (or, with finish,
// completing its work anyway). causes gets the context's cause.
type cancellable struct {
	started chan runtime.JobID
	causes  chan error
}

func newCancellable() *cancellable {
	return &cancellable{started: make(chan runtime.JobID, 16), causes: make(chan error, 16)}
}

func (c *cancellable) registration(kind string, finish bool) runtime.Registration {
	return runtime.Registration{Kind: kind, Timeout: time.Minute, Handler: func(ctx context.Context, job *runtime.Job) error {
		c.started <- job.ID
		<-ctx.Done()
		c.causes <- context.Cause(ctx)
		if finish {
			return nil
		}
		return ctx.Err()
	}}
}

func (c *cancellable) waitStarted(t *testing.T, want runtime.JobID) {
	t.Helper()
	select {
	case id := <-c.started:
		if id != want {
			t.Fatalf("started job %d, want %d", id, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("job %d did not start", want)
	}
}

func (c *cancellable) wantCause(t *testing.T) {
	t.Helper()
	select {
	case cause := <-c.causes:
		if !errors.Is(cause, runtime.ErrJobCancelled) {
			t.Fatalf("handler's context cause: %v, want ErrJobCancelled", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context was not cancelled")
	}
}

// Cancelling a running job reaches its handler on whichever of several
// workers runs it, in both modes: its context is cancelled with
// ErrJobCancelled, the job ends cancelled after one attempt although it has
// attempts left, and its group moves on to the next job. A handler that
// completes anyway succeeds.
func TestCancelRunningJob(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			c := newCancellable()
			var nextRan sync.WaitGroup
			nextRan.Add(1)
			regs := []runtime.Registration{
				c.registration("cancel.wait", false),
				c.registration("cancel.finish", true),
				{Kind: "cancel.next", Handler: func(ctx context.Context, job *runtime.Job) error { nextRan.Done(); return nil }},
			}
			// Maintenance, which would find the request too, waits an hour:
			// the notification alone must reach the handler.
			cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: mode}}, PollInterval: time.Minute, MaintenanceInterval: time.Hour}
			for range 3 {
				startWorker(t, b.url, cfg, regs...)
			}

			id := enqueue(t, b.pool, "cancel.wait", map[string]any{}, runtime.WithGroup("g"), runtime.WithMaxAttempts(5))
			next := enqueue(t, b.pool, "cancel.next", map[string]any{}, runtime.WithGroup("g"))
			c.waitStarted(t, id)
			if ok, err := runtime.CancelJob(ctx, b.pool, id); err != nil || !ok {
				t.Fatalf("CancelJob of a running job: %v, %v", ok, err)
			}
			c.wantCause(t)
			j := b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusCancelled, testdb.PgtaskJobStatusQueued,
				testdb.PgtaskJobStatusScheduled, testdb.PgtaskJobStatusFailed)
			if j.Status != testdb.PgtaskJobStatusCancelled || j.Attempts != 1 || j.FinishedAt == nil {
				t.Fatalf("cancelled job: status %s, attempts %d, finished %v; want cancelled after 1 attempt", j.Status, j.Attempts, j.FinishedAt)
			}
			if errs := errorsOf(t, j); len(errs) != 1 || !strings.Contains(errs[0].Error, "cancelled by an operator") {
				t.Fatalf("error history %+v: want the cancelled attempt", errs)
			}
			b.waitStatus(t, next, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
			nextRan.Wait()
			if ok, err := runtime.CancelJob(ctx, b.pool, id); err != nil || ok {
				t.Fatalf("CancelJob of a finished job: %v, %v; want false", ok, err)
			}

			done := enqueue(t, b.pool, "cancel.finish", map[string]any{})
			c.waitStarted(t, done)
			if ok, err := runtime.CancelJob(ctx, b.pool, done); err != nil || !ok {
				t.Fatalf("CancelJob: %v, %v", ok, err)
			}
			c.wantCause(t)
			b.waitStatus(t, done, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
		})
	}
}

// A cancel request whose notification the worker missed (its listener's
// session was cut just before) still reaches the handler: maintenance
// reads the pending requests. Bulk cancellation by filter reaches running
// jobs too.
func TestCancelReachesAWorkerThatMissedTheNotification(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c := newCancellable()
	startWorker(t, b.url, runtime.Config{PollInterval: time.Minute}, c.registration("cancel.wait", false))
	id := enqueue(t, b.pool, "cancel.wait", map[string]any{})
	c.waitStarted(t, id)
	// The worker's listener may still be connecting: end it once it listens.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, err := b.q.TerminateListeners(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TerminateListeners ended %d sessions, want the worker's listener", n)
		}
	}
	n, err := runtime.CancelJobs(ctx, b.pool, runtime.JobFilter{Kind: "cancel.wait"}, nil)
	if err != nil || n != 1 {
		t.Fatalf("CancelJobs: %d, %v", n, err)
	}
	c.wantCause(t)
	b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusCancelled)
}

// A cancelled job whose worker stops answering for it (its handler ignores
// the cancellation, and its lease runs out) ends cancelled when another
// worker takes it over, not retried; the stale worker's late outcome is
// refused.
func TestCancelledJobTakenOverEndsCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: runtime.ModeLease}}, AbandonGrace: time.Hour, ShutdownGrace: time.Second},
		runtime.Registration{Kind: "cancel.stubborn", Handler: func(ctx context.Context, job *runtime.Job) error {
			started <- struct{}{}
			<-release
			return errors.New("stopped at last")
		}})
	id := enqueue(t, b.pool, "cancel.stubborn", map[string]any{}, runtime.WithMaxAttempts(5))
	<-started
	if ok, err := runtime.CancelJob(ctx, b.pool, id); err != nil || !ok {
		t.Fatalf("CancelJob: %v, %v", ok, err)
	}
	// The handler ignores the cancellation: the job stays started until its
	// lease runs out, as a hung worker's would.
	time.Sleep(200 * time.Millisecond)
	if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusStarted {
		t.Fatalf("job is %s while its handler runs", j.Status)
	}
	if n, err := b.q.ExpireLease(ctx, int64(id)); err != nil || n != 1 {
		t.Fatalf("ExpireLease: %d, %v", n, err)
	}
	startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: runtime.ModeLease}}}, runtime.Registration{Kind: "cancel.stubborn", Handler: func(context.Context, *runtime.Job) error {
		t.Error("a cancelled job ran again")
		return nil
	}})
	j := b.waitStatus(t, id, 20*time.Second, testdb.PgtaskJobStatusCancelled)
	if j.Attempts != 1 {
		t.Fatalf("attempts %d, want 1", j.Attempts)
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for b.job(t, id).StaleOutcomes == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stale worker's late outcome was not refused and counted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusCancelled {
		t.Fatalf("after the late outcome the job is %s", j.Status)
	}
}

// Metadata travels with the job: the handler and GetJob see what the
// enqueue set, and metadata
// the database cannot store is refused before anything is inserted.
func TestMetadataTravelsWithTheJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	seen := make(chan map[string]string, 4)
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{string(mode): {Mode: mode}}},
			runtime.Registration{Kind: "meta." + string(mode), Queue: string(mode), Handler: func(ctx context.Context, job *runtime.Job) error {
				if job.RunAfter.IsZero() || job.RunAfter.Before(job.CreatedAt.Add(-time.Second)) {
					t.Errorf("job %d RunAfter %v, created %v", job.ID, job.RunAfter, job.CreatedAt)
				}
				seen <- job.Metadata
				return nil
			}})
	}
	shared := map[string]string{"tenant": "acme", "trace": "00-abc-01"}
	for _, mode := range []string{"held", "lease"} {
		req := runtime.EnqueueRequest{Kind: "meta." + mode, Payload: []byte(`{}`)}
		req.Queue = mode
		req.Metadata = shared
		req.Apply(runtime.WithMetadata("request", "r-"+mode))
		id, err := runtime.Enqueue(ctx, b.pool, req)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"tenant": "acme", "trace": "00-abc-01", "request": "r-" + mode}
		select {
		case got := <-seen:
			if !maps.Equal(got, want) {
				t.Fatalf("%s handler saw metadata %v, want %v", mode, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s job did not run", mode)
		}
		info, err := runtime.GetJob(ctx, b.pool, id)
		if err != nil || !maps.Equal(info.Metadata, want) {
			t.Fatalf("GetJob metadata %v, %v; want %v", info.Metadata, err, want)
		}
	}
	if len(shared) != 2 {
		t.Fatalf("WithMetadata changed the caller's map: %v", shared)
	}

	// A job without metadata has none, in a batch with one that has.
	ids, err := runtime.EnqueueMany(ctx, b.pool, []runtime.EnqueueRequest{
		{Kind: "meta.none", Payload: []byte(`{}`)},
		{Kind: "meta.some", Payload: []byte(`{}`), EnqueueOptions: runtime.EnqueueOptions{Metadata: map[string]string{"k": "v"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []map[string]string{nil, {"k": "v"}} {
		info, err := runtime.GetJob(ctx, b.pool, ids[i])
		if err != nil || !maps.Equal(info.Metadata, want) || (want == nil) != (info.Metadata == nil) {
			t.Fatalf("job %d metadata %v, %v; want %v", i, info.Metadata, err, want)
		}
	}

	for _, bad := range []map[string]string{
		{"": "empty key"},
		{"nul": "a\x00b"},
		{"utf8": "\xff"},
		{"big": strings.Repeat("x", runtime.MaxMetadataBytes)},
	} {
		_, err := runtime.Enqueue(ctx, b.pool, runtime.EnqueueRequest{Kind: "meta.bad", Payload: []byte(`{}`),
			EnqueueOptions: runtime.EnqueueOptions{Metadata: bad}})
		var ee *runtime.EnqueueError
		if !errors.As(err, &ee) || !strings.Contains(err.Error(), "metadata") {
			t.Fatalf("metadata %q: err %v, want an EnqueueError about metadata", bad, err)
		}
	}
	if n, err := runtime.CountJobs(ctx, b.pool, runtime.JobFilter{Kind: "meta.bad"}); err != nil || n != 0 {
		t.Fatalf("refused metadata inserted %d jobs (%v)", n, err)
	}
}

// A job of a held batch that is cancelled before its handler starts, and
// is then handed back unstarted (the job before it in its group failed and
// waits for its retry), ends cancelled without running: the request
// outlives the hand-back.
func TestCancelledJobHandedBackUnstartedEndsCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	release := make(chan struct{})
	headStarted := make(chan struct{}, 4)
	var failed sync.Once
	// Both are enqueued before the worker starts, so its first claim takes
	// them in one batch.
	ids, err := runtime.EnqueueMany(ctx, b.pool, []runtime.EnqueueRequest{
		{Kind: "cancel.head", Payload: []byte(`{}`), EnqueueOptions: runtime.EnqueueOptions{Group: "g"}},
		{Kind: "cancel.follower", Payload: []byte(`{}`), EnqueueOptions: runtime.EnqueueOptions{Group: "g"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	head, follower := ids[0], ids[1]
	startBatching(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {BatchSize: 10}}},
		runtime.Registration{Kind: "cancel.head", Handler: func(ctx context.Context, job *runtime.Job) error {
			headStarted <- struct{}{}
			err := error(nil)
			failed.Do(func() {
				<-release
				err = runtime.RetryAfter(100*time.Millisecond, errors.New("once"))
			})
			return err
		}},
		runtime.Registration{Kind: "cancel.follower", Handler: func(context.Context, *runtime.Job) error {
			t.Error("the cancelled follower ran")
			return nil
		}})
	<-headStarted
	if j := b.job(t, follower); j.Status != testdb.PgtaskJobStatusStarted {
		t.Fatalf("the follower is %s; want it claimed in the head's batch", j.Status)
	}
	if ok, err := runtime.CancelJob(ctx, b.pool, follower); err != nil || !ok {
		t.Fatalf("CancelJob: %v, %v", ok, err)
	}
	close(release)
	j := b.waitStatus(t, follower, 10*time.Second, testdb.PgtaskJobStatusCancelled, testdb.PgtaskJobStatusSucceeded)
	if j.Status != testdb.PgtaskJobStatusCancelled {
		t.Fatalf("follower is %s", j.Status)
	}
	b.waitStatus(t, head, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
}

// A cancel that commits while the attempt's failure is being recorded (so
// fail_job cannot see it) still ends the job cancelled: the request
// outlives the attempt, and maintenance applies it to the job waiting for
// its retry.
func TestCancelRacingTheFailureIsApplied(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := enqueue(t, b.pool, "cancel.race", map[string]any{}, runtime.WithMaxAttempts(5))
	claimed, err := b.gen.ClaimJobs(ctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: 1})
	if err != nil || len(claimed) != 1 || claimed[0].ID != int64(id) {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	w, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Rollback(ctx) //nolint:errcheck // committed below
	status, err := gen.New(w).FailJob(ctx, gen.FailJobParams{ID: int64(id), Attempt: 1,
		Error: json.RawMessage(`{"attempt": 1, "error": "failed"}`), RetryInUs: pgtype.Int8{Int64: 60_000_000, Valid: true}})
	if err != nil || status != "scheduled" {
		t.Fatalf("fail_job: %q, %v", status, err)
	}
	if ok, err := runtime.CancelJob(ctx, b.pool, id); err != nil || !ok {
		t.Fatalf("CancelJob while the failure is being recorded: %v, %v", ok, err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusScheduled {
		t.Fatalf("after the failure's commit the job is %s; want scheduled, the request not yet applied", j.Status)
	}
	if n, err := b.gen.ApplyCancelRequests(ctx, 100); err != nil || n != 1 {
		t.Fatalf("ApplyCancelRequests: %d, %v; want 1", n, err)
	}
	if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusCancelled || j.Attempts != 1 {
		t.Fatalf("job is %s after %d attempts; want cancelled after 1", j.Status, j.Attempts)
	}
	if n, err := b.gen.ApplyCancelRequests(ctx, 100); err != nil || n != 0 {
		t.Fatalf("ApplyCancelRequests again: %d, %v; want none left", n, err)
	}
}

// A cancel that arrives after the attempt's deadline leaves it timed out:
// a handler that outlived its timeout fails whatever it returns.
func TestCancelAfterTheDeadlineLeavesTheAttemptTimedOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	started := make(chan struct{}, 1)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "cancel.late", Timeout: 200 * time.Millisecond,
		Backoff: runtime.Backoff{Min: time.Hour},
		Handler: func(ctx context.Context, job *runtime.Job) error {
			started <- struct{}{}
			time.Sleep(time.Second) // ignores its context
			return nil
		}})
	id := enqueue(t, b.pool, "cancel.late", map[string]any{})
	<-started
	time.Sleep(500 * time.Millisecond)
	if ok, err := runtime.CancelJob(ctx, b.pool, id); err != nil || !ok {
		t.Fatalf("CancelJob: %v, %v", ok, err)
	}
	j := b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusScheduled, testdb.PgtaskJobStatusSucceeded,
		testdb.PgtaskJobStatusCancelled, testdb.PgtaskJobStatusFailed)
	if errs := errorsOf(t, j); j.Status == testdb.PgtaskJobStatusSucceeded || len(errs) != 1 || !strings.Contains(errs[0].Error, "timed out") {
		t.Fatalf("job %s with errors %+v; want the attempt failed as timed out", j.Status, errs)
	}
}

var addMetadataHook = sync.OnceFunc(func() {
	runtime.AddEnqueueHook(func(_ context.Context, req *runtime.EnqueueRequest) error {
		if req.Kind == "meta.hooked" {
			if req.Metadata == nil {
				req.Metadata = map[string]string{}
			}
			req.Metadata["hooked"] = "yes"
		}
		return nil
	})
})

// An enqueue hook adds metadata to each request's own copy: the map the
// caller shares among requests stays as it was.
func TestEnqueueHookAddsMetadataToItsOwnCopy(t *testing.T) {
	t.Parallel()
	addMetadataHook()
	b := setup(t)
	ctx := context.Background()
	shared := map[string]string{"tenant": "acme"}
	opts := runtime.EnqueueOptions{Metadata: shared}
	ids, err := runtime.EnqueueMany(ctx, b.pool, []runtime.EnqueueRequest{
		{Kind: "meta.hooked", Payload: []byte(`{}`), EnqueueOptions: opts},
		{Kind: "meta.plain", Payload: []byte(`{}`), EnqueueOptions: opts},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(shared, map[string]string{"tenant": "acme"}) {
		t.Fatalf("the hook changed the caller's map: %v", shared)
	}
	for i, want := range []map[string]string{{"tenant": "acme", "hooked": "yes"}, {"tenant": "acme"}} {
		info, err := runtime.GetJob(ctx, b.pool, ids[i])
		if err != nil || !maps.Equal(info.Metadata, want) {
			t.Fatalf("job %d metadata %v, %v; want %v", i, info.Metadata, err, want)
		}
	}
}

// A cancel notification that no operator's request stands behind (any
// session may NOTIFY) does not cancel the handler.
func TestForgedCancelNotificationIsIgnored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "cancel.forged", Handler: func(ctx context.Context, job *runtime.Job) error {
		started <- struct{}{}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		causes <- context.Cause(ctx)
		return nil
	}})
	id := enqueue(t, b.pool, "cancel.forged", map[string]any{})
	<-started
	if err := b.q.Notify(ctx, testdb.NotifyParams{Channel: "pgtask_cancel", Payload: fmt.Sprintf("%d:1", id)}); err != nil {
		t.Fatal(err)
	}
	if cause := <-causes; cause != nil {
		t.Fatalf("a forged notification cancelled the handler: %v", cause)
	}
	b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
}
