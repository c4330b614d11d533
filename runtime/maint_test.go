package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// logged are the records of logs with message msg, and the value of their
// attribute key, formatted.
func (l *recordedLogs) logged(msg, key string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.records {
		if r.Message != msg {
			continue
		}
		v := ""
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				v = fmt.Sprint(a.Value.Any())
				return false
			}
			return true
		})
		out = append(out, v)
	}
	return out
}

const unmovableMsg = "pgtask: due jobs cannot be queued: their rows break a check constraint added after they were stored (NOT VALID), so no change to them can be written; delete them"

// The promotion service, driven step by step, queues the due scheduled
// jobs, leaves those not due, and names a due job it cannot move once
// until the set of such jobs changes.
func TestPromoteServiceStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	logs := &recordedLogs{}
	w := idleWorker(t, b.url, runtime.Config{Logger: slog.New(logs)})
	bad := insertOverBound(t, b, 1)
	due := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithDelay(time.Millisecond))
	later := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithDelay(time.Hour))
	time.Sleep(20 * time.Millisecond)

	if err := w.PromoteStep(ctx); err != nil {
		t.Fatal(err)
	}
	if s := b.job(t, due).Status; s != testdb.PgtaskJobStatusQueued {
		t.Errorf("the due job is %s, want queued", s)
	}
	if s := b.job(t, later).Status; s != testdb.PgtaskJobStatusScheduled {
		t.Errorf("the job due in an hour is %s, want scheduled", s)
	}
	if s := b.job(t, runtime.JobID(bad)).Status; s != testdb.PgtaskJobStatusScheduled {
		t.Errorf("the row that breaks the bound is %s, want left scheduled", s)
	}
	want := []string{fmt.Sprint([]int64{bad})}
	if got := logs.logged(unmovableMsg, "jobs"); !slices.Equal(got, want) {
		t.Fatalf("after the first step the unmovable jobs were logged as %q, want %q", got, want)
	}

	// Said once until the set changes.
	if err := w.PromoteStep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := logs.logged(unmovableMsg, "jobs"); !slices.Equal(got, want) {
		t.Fatalf("after a second step with nothing new the unmovable jobs were logged as %q, want %q", got, want)
	}
	bad2 := insertOverBound(t, b, 1)
	time.Sleep(20 * time.Millisecond)
	if err := w.PromoteStep(ctx); err != nil {
		t.Fatal(err)
	}
	want = append(want, fmt.Sprint([]int64{bad, bad2}))
	if got := logs.logged(unmovableMsg, "jobs"); !slices.Equal(got, want) {
		t.Fatalf("after another job became unmovable the logs say %q, want %q", got, want)
	}
}

// The rescue service, driven one step, requeues the leased job of a dead
// worker, takes over the one whose lease ran out while its worker lives,
// and rescues this worker's own held job whose session is gone unless a
// runner still holds its claim.
func TestRescueServiceStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	logs := &recordedLogs{}
	w := idleWorker(t, b.url, runtime.Config{Logger: slog.New(logs)})
	leased := func(worker int32, leaseMs int64) runtime.JobID {
		t.Helper()
		enqueue(t, b.pool, "k", map[string]int{}, runtime.WithQueue("lq"))
		rows, err := b.gen.ClaimLeasedJobs(ctx, gen.ClaimLeasedJobsParams{Queue: "lq", Max: 1, WorkerID: worker, LeaseMs: leaseMs, Token: 1})
		if err != nil || len(rows) != 1 {
			t.Fatalf("lease claim: %v, %v", rows, err)
		}
		return runtime.JobID(rows[0].ID)
	}
	// Worker 7 is dead; worker 8 lives (its lock is held here).
	dead := leased(7, 600_000)
	hung := leased(8, 1)
	alive, err := pgx.Connect(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer alive.Close(ctx) //nolint:errcheck // it only holds worker 8's lock
	if err := gen.New(alive).LockWorker(ctx, 8); err != nil {
		t.Fatal(err)
	}
	// This worker's own claims, made on sessions that then ended.
	const strayToken, heldToken = 11, 12
	var own []runtime.JobID
	for _, token := range []int64{strayToken, heldToken} {
		enqueue(t, b.pool, "k", map[string]int{})
		conn, err := pgx.Connect(ctx, b.url)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := gen.New(conn).ClaimJobs(ctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: w.ID(),
			Token: pgtype.Int8{Int64: token, Valid: true}})
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim: %v, %v", rows, err)
		}
		pid := int32(conn.PgConn().PID())
		if err := conn.Close(ctx); err != nil {
			t.Fatal(err)
		}
		waitGone(t, b, pid)
		own = append(own, runtime.JobID(rows[0].ID))
	}
	w.HoldClaim(heldToken)
	time.Sleep(20 * time.Millisecond)

	if err := w.RescueStep(ctx); err != nil {
		t.Fatal(err)
	}
	for name, id := range map[string]runtime.JobID{"dead worker's": dead, "expired lease's": hung, "stray own": own[0]} {
		if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusQueued {
			t.Errorf("the %s job is %s, want queued", name, j.Status)
		}
	}
	if j := b.job(t, own[1]); j.Status != testdb.PgtaskJobStatusStarted {
		t.Errorf("the job of a claim a runner holds is %s, want left started", j.Status)
	}
	for msg, id := range map[string]runtime.JobID{
		"pgtask: requeued jobs whose worker died mid-attempt":                              dead,
		"pgtask: took over jobs whose lease ran out while their worker lived":              hung,
		"pgtask: requeued jobs of this worker whose session ended and that no runner held": own[0],
	} {
		if got, want := logs.logged(msg, "jobs"), []string{fmt.Sprint([]int64{int64(id)})}; !slices.Equal(got, want) {
			t.Errorf("%q logged with jobs %q, want %q", msg, got, want)
		}
	}

	// Once its runner lets the claim go, the next step rescues that job.
	w.ForgetClaim(heldToken)
	if err := w.RescueStep(ctx); err != nil {
		t.Fatal(err)
	}
	if j := b.job(t, own[1]); j.Status != testdb.PgtaskJobStatusQueued {
		t.Errorf("the job of a claim its runner let go is %s, want queued", j.Status)
	}
}

// The cancel-request service, driven one step, cancels the running attempt
// an operator asked to cancel and no other, and carries out the request for
// a job whose attempt ended before the request reached it (it was handed
// back unstarted as the request was made).
func TestCancelServiceStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := idleWorker(t, b.url, runtime.Config{})
	leased := func(token int64) runtime.JobID {
		t.Helper()
		enqueue(t, b.pool, "k", map[string]int{})
		rows, err := b.gen.ClaimLeasedJobs(ctx, gen.ClaimLeasedJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: 8, LeaseMs: 600_000, Token: token})
		if err != nil || len(rows) != 1 {
			t.Fatalf("lease claim: %v, %v", rows, err)
		}
		return runtime.JobID(rows[0].ID)
	}
	alive, err := pgx.Connect(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer alive.Close(ctx) //nolint:errcheck // it only holds worker 8's lock
	if err := gen.New(alive).LockWorker(ctx, 8); err != nil {
		t.Fatal(err)
	}
	// Jobs asked and not asked to cancel run here; a third is handed back
	// unstarted as it is asked to cancel.
	asked, other, handedBack := leased(1), leased(1), leased(2)
	askedCtx, done := w.RunAsAttempt(asked, 1)
	defer done()
	otherCtx, done2 := w.RunAsAttempt(other, 1)
	defer done2()
	if ok, err := runtime.CancelJob(ctx, b.pool, asked); err != nil || !ok {
		t.Fatalf("CancelJob(%d): %v, %v", asked, ok, err)
	}
	cancelAsHandedBack(t, b, handedBack, 2)
	if askedCtx.Err() != nil {
		t.Fatal("the attempt was cancelled before the step")
	}

	if err := w.CancelStep(ctx); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(askedCtx); !errors.Is(cause, runtime.ErrJobCancelled) {
		t.Errorf("the attempt asked to cancel has cause %v, want ErrJobCancelled", cause)
	}
	if otherCtx.Err() != nil {
		t.Errorf("an attempt nobody asked to cancel was cancelled: %v", context.Cause(otherCtx))
	}
	if s := b.job(t, handedBack).Status; s != testdb.PgtaskJobStatusCancelled {
		t.Errorf("the job handed back after its cancel request is %s, want cancelled", s)
	}
	if s := b.job(t, asked).Status; s != testdb.PgtaskJobStatusStarted {
		t.Errorf("the running job asked to cancel is %s, want started until its handler returns", s)
	}
}

// The leader service, driven step by step on two workers, elects the first
// to stand, leaves the other a follower while the leader's term lasts,
// stands again only every few steps, and hands the leadership over when the
// leader resigns.
func TestLeaderServiceStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	logs := &recordedLogs{}
	first := idleWorker(t, b.url, runtime.Config{Logger: slog.New(logs)})
	second := idleWorker(t, b.url, runtime.Config{})
	if first.IsLeader() || second.IsLeader() {
		t.Fatal("a worker leads before it stood for election")
	}
	first.LeaderStep(ctx)
	if !first.IsLeader() {
		t.Fatal("the first worker to stand is not the leader")
	}
	if id, err := b.q.CurrentLeader(ctx); err != nil || id != first.ID() {
		t.Fatalf("the database's leader is %d (%v), want %d", id, err, first.ID())
	}
	if !logs.has("pgtask: this worker is now the leader: it runs retention and periodic jobs") {
		t.Error("the new leader did not say so")
	}
	second.LeaderStep(ctx) // its first step stands, and loses
	if second.IsLeader() {
		t.Fatal("two workers lead at once")
	}
	first.LeaderResign(ctx)
	if first.IsLeader() {
		t.Fatal("the worker that resigned still counts itself leader")
	}
	// The second stands again only on its fourth step after the first.
	for i := 1; i < 4; i++ {
		second.LeaderStep(ctx)
		if second.IsLeader() {
			t.Fatalf("the second worker stood for election on its step %d", i+1)
		}
	}
	second.LeaderStep(ctx)
	if !second.IsLeader() {
		t.Fatal("the second worker did not take over once the leader resigned")
	}
	if id, err := b.q.CurrentLeader(ctx); err != nil || id != second.ID() {
		t.Fatalf("the database's leader is %d (%v), want %d", id, err, second.ID())
	}
}

// The retention service, driven step by step, deletes nothing while its
// worker does not lead; leading, it deletes the finished jobs past their
// status's age and keeps the others, and then waits out its interval.
func TestRetentionServiceStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := idleWorker(t, b.url, runtime.Config{Retention: runtime.Retention{
		Succeeded: time.Hour, Cancelled: runtime.KeepForever, Interval: time.Hour,
	}})
	if err := w.Register(runtime.Registration{Kind: "ok", Handler: func(context.Context, *runtime.Job) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	oldOK := enqueue(t, b.pool, "ok", map[string]int{})
	newOK := enqueue(t, b.pool, "ok", map[string]int{})
	if n, err := w.Drain(ctx); err != nil || n != 2 {
		t.Fatalf("Drain: %d, %v", n, err)
	}
	cancelled := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithQueue("unserved"))
	if ok, err := runtime.CancelJob(ctx, b.pool, cancelled); err != nil || !ok {
		t.Fatalf("cancel: %v, %v", ok, err)
	}
	backdate := func(id runtime.JobID, age time.Duration) {
		t.Helper()
		if err := b.q.BackdateFinished(ctx, testdb.BackdateFinishedParams{ID: int64(id), AgeSeconds: age.Seconds()}); err != nil {
			t.Fatal(err)
		}
	}
	backdate(oldOK, 2*time.Hour)
	backdate(newOK, 10*time.Minute)
	backdate(cancelled, 30*24*time.Hour)
	exists := func(id runtime.JobID) bool {
		t.Helper()
		_, err := runtime.GetJob(ctx, b.pool, id)
		if err != nil && !errors.Is(err, runtime.ErrJobNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}

	w.RetainStep(ctx)
	if !exists(oldOK) {
		t.Fatal("a worker that does not lead deleted a job")
	}
	w.LeaderStep(ctx)
	if !w.IsLeader() {
		t.Fatal("the worker was not elected")
	}
	w.RetainStep(ctx)
	if exists(oldOK) {
		t.Error("the success older than its age is kept")
	}
	if !exists(newOK) {
		t.Error("the success younger than its age was deleted")
	}
	if !exists(cancelled) {
		t.Error("a cancelled job was deleted, though cancelled jobs are kept forever")
	}
	// The next round is an interval away.
	backdate(newOK, 2*time.Hour)
	w.RetainStep(ctx)
	if !exists(newOK) {
		t.Error("retention ran again before its interval passed")
	}
}

// The periodic-job service, driven step by step, enqueues nothing while its
// worker does not lead; leading, it looks for due ticks every fourth step
// only, and enqueues one job for a tick that fell due.
func TestPeriodicServiceStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := idleWorker(t, b.url, runtime.Config{})
	if err := w.RegisterPeriodic(runtime.PeriodicJob{Name: "every-second", Schedule: "@every 1s", Enqueue: enqueueTick("tick")}); err != nil {
		t.Fatal(err)
	}
	jobs := func() int {
		t.Helper()
		js, err := b.q.ListJobs(ctx, runtime.DefaultQueue)
		if err != nil {
			t.Fatal(err)
		}
		return len(js)
	}
	// Step 0 is one that looks, but the worker does not lead: had it
	// looked, this worker would count ticks from then, and step 4 would
	// find one due.
	w.PeriodicStep(ctx)
	w.LeaderStep(ctx)
	if !w.IsLeader() {
		t.Fatal("the worker was not elected")
	}
	time.Sleep(1100 * time.Millisecond)
	for range 3 {
		w.PeriodicStep(ctx)
	}
	w.PeriodicStep(ctx) // step 4 looks: this worker starts counting ticks now
	if n := jobs(); n != 0 {
		t.Fatalf("step 4 enqueued %d jobs, as if the step of a worker that did not lead had looked", n)
	}
	time.Sleep(1100 * time.Millisecond)
	for i := 5; i < 8; i++ {
		w.PeriodicStep(ctx)
		if n := jobs(); n != 0 {
			t.Fatalf("step %d, which does not look, enqueued %d jobs", i, n)
		}
	}
	w.PeriodicStep(ctx) // step 8 looks
	if n := jobs(); n != 1 {
		t.Fatalf("the step that looked after a tick fell due enqueued %d jobs, want 1", n)
	}
}

// The kinds-recording service, driven step by step, records nothing on its
// first step and records the worker's kinds once its interval passed, so
// that a kind whose record was lost counts as handled again.
func TestKindsServiceStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := runtime.PauseQueue(ctx, b.pool, runtime.DefaultQueue); err != nil {
		t.Fatal(err)
	}
	enqueue(t, b.pool, "old", map[string]int{})
	w := idleWorker(t, b.url, runtime.Config{})
	if err := w.Register(runtime.Registration{Kind: "old", Handler: func(context.Context, *runtime.Job) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	// Drain fixes the kinds the worker claims (and runs nothing: the queue
	// is paused).
	if n, err := w.Drain(ctx); err != nil || n != 0 {
		t.Fatalf("Drain: %d, %v", n, err)
	}
	handled := func() bool {
		t.Helper()
		kinds, err := runtime.UnhandledKinds(ctx, b.pool)
		if err != nil {
			t.Fatal(err)
		}
		return len(kinds) == 0
	}
	if handled() {
		t.Fatal("the kind counts as handled before the worker recorded it")
	}
	w.RecordKindsEvery(10 * time.Millisecond)
	w.KindsStep(ctx)
	if handled() {
		t.Fatal("the first step recorded the kinds; it should only count the interval from now")
	}
	time.Sleep(20 * time.Millisecond)
	w.KindsStep(ctx)
	if !handled() {
		t.Fatal("the step after the interval did not record the worker's kinds")
	}
}
