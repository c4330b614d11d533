package runtime_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// longQueue is over the bound on queue names (jobs_queue_bounded).
var longQueue = strings.Repeat("q", runtime.MaxQueueBytes+1)

// insertOverBound stores, as code from before the bound could have, a job
// of longQueue delayed by delayUs, and puts the bound back NOT VALID, as a
// migration adding it to a table that held such rows would: the row breaks
// it, and no change to the row can be written.
func insertOverBound(t *testing.T, b *bundle, delayUs int64) int64 {
	t.Helper()
	var id int64
	withoutQueueBound(t, b, func() { id = insertLongQueueJob(t, b, delayUs) })
	return id
}

// withoutQueueBound runs f with the bound on queue names dropped, then puts
// it back NOT VALID.
func withoutQueueBound(t *testing.T, b *bundle, f func()) {
	t.Helper()
	ctx := context.Background()
	if err := b.q.DropQueueBound(ctx); err != nil {
		t.Fatal(err)
	}
	f()
	if err := b.q.RestoreQueueBoundNotValid(ctx); err != nil {
		t.Fatal(err)
	}
}

func insertLongQueueJob(t *testing.T, b *bundle, delayUs int64) int64 {
	t.Helper()
	r, err := b.gen.InsertJobs(context.Background(), gen.InsertJobsParams{
		Payloads: []json.RawMessage{json.RawMessage(`{}`)}, Settings: []int32{1}, Groups: []int32{0},
		Kinds: []string{"k"}, Queues: []string{longQueue}, Priorities: []int16{0}, AgingMs: []int32{0}, MaxAttempts: []int32{3},
		FailBlocksGroup: []bool{false}, RunAt: []string{""}, DelayUs: []int64{delayUs},
		GroupQueues: []string{}, GroupKeys: []string{},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r.Ids[0]
}

// A due scheduled job whose row breaks a check added NOT VALID after it
// was stored cannot be promoted; the due jobs behind it are, and the
// promotion names the one it left.
func TestPromotionPassesOverARowThatBreaksAConstraint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	bad := insertOverBound(t, b, 1)
	var good []runtime.JobID
	for i := range 3 {
		good = append(good, enqueue(t, b.pool, "k", map[string]int{"n": i}, runtime.WithDelay(time.Millisecond),
			runtime.WithGroup([]string{"", "g", "g"}[i])))
	}
	time.Sleep(20 * time.Millisecond)

	r, err := b.gen.PromoteScheduled(ctx, 10)
	if err != nil || r.Moved != 3 || len(r.Skipped) != 1 || r.Skipped[0] != bad {
		t.Fatalf("PromoteScheduled: %+v, %v; want the 3 good due jobs moved and job %d skipped", r, err, bad)
	}
	for i, id := range good {
		if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusQueued {
			t.Errorf("good job %d is %s, want queued", i, j.Status)
		}
	}
	if j := b.job(t, runtime.JobID(bad)); j.Status != testdb.PgtaskJobStatusScheduled {
		t.Errorf("the row that breaks the bound is %s, want left scheduled", j.Status)
	}

	// A worker's maintenance goes on too, and its jobs run.
	w := idleWorker(t, b.url, runtime.Config{})
	if err := w.Register(runtime.Registration{Kind: "k", Handler: func(context.Context, *runtime.Job) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	later := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithDelay(time.Millisecond))
	time.Sleep(20 * time.Millisecond)
	if n, err := w.Drain(ctx); err != nil || n != 4 {
		t.Fatalf("Drain: %d, %v; want the 4 good jobs run", n, err)
	}
	if j := b.job(t, later); j.Status != testdb.PgtaskJobStatusSucceeded {
		t.Fatalf("a job that fell due later is %s, want succeeded", j.Status)
	}
}

// Started jobs of a dead worker, and leased jobs whose lease ran out, are
// rescued and taken over past a job whose row breaks a check added NOT
// VALID after it was stored: that one stays as it is.
func TestRescueAndTakeoverPassOverARowThatBreaksAConstraint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	claim := func(queue string, worker int32, leaseMs int64) int64 {
		t.Helper()
		rows, err := b.gen.ClaimLeasedJobs(ctx, gen.ClaimLeasedJobsParams{Queue: queue, Max: 1, WorkerID: worker, LeaseMs: leaseMs, Token: 1})
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim from %.10s: %v, %v", queue, rows, err)
		}
		return rows[0].ID
	}
	// Worker 7 died with a leased job of each queue; worker 8 lives on (its
	// lock is held here) with leases that ran out.
	var dead, hung [2]int64
	withoutQueueBound(t, b, func() {
		insertLongQueueJob(t, b, 0)
		dead[0] = claim(longQueue, 7, 600_000)
		insertLongQueueJob(t, b, 0)
		hung[0] = claim(longQueue, 8, 1)
	})
	for i, w := range []int32{7, 8} {
		enqueue(t, b.pool, "k", map[string]int{}, runtime.WithQueue("fine"))
		id := claim("fine", w, []int64{600_000, 1}[i])
		if i == 0 {
			dead[1] = id
		} else {
			hung[1] = id
		}
	}
	alive, err := pgx.Connect(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer alive.Close(ctx) //nolint:errcheck // it only holds worker 8's lock
	if err := gen.New(alive).LockWorker(ctx, 8); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)

	rescued, err := b.gen.RescueOrphans(ctx, gen.RescueOrphansParams{Max: 10, WorkerID: 1})
	if err != nil || len(rescued) != 1 || rescued[0] != dead[1] {
		t.Fatalf("RescueOrphans: %v, %v; want job %d rescued and job %d left", rescued, err, dead[1], dead[0])
	}
	expired, err := b.gen.ExpireLeases(ctx, gen.ExpireLeasesParams{Max: 10, WorkerID: 1})
	if err != nil || len(expired) != 1 || expired[0] != hung[1] {
		t.Fatalf("ExpireLeases: %v, %v; want job %d taken over and job %d left", expired, err, hung[1], hung[0])
	}
	for _, id := range []int64{dead[1], hung[1]} {
		if j := b.job(t, runtime.JobID(id)); j.Status != testdb.PgtaskJobStatusQueued {
			t.Errorf("job %d is %s, want queued for its next attempt", id, j.Status)
		}
	}
	for _, id := range []int64{dead[0], hung[0]} {
		if j := b.job(t, runtime.JobID(id)); j.Status != testdb.PgtaskJobStatusStarted {
			t.Errorf("the row that breaks the bound, job %d, is %s, want left started", id, j.Status)
		}
	}
}

// Cancel requests whose attempt ended are carried out past a job whose row
// breaks a check added NOT VALID after it was stored: that one stays as it
// is, and its request goes.
func TestCancelRequestsPassOverARowThatBreaksAConstraint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Each job is claimed, and handed back unstarted as it is asked to
	// cancel: its request waits for maintenance to carry it out.
	askAndHandBack := func(queue string, token int64) int64 {
		t.Helper()
		rows, err := b.gen.ClaimLeasedJobs(ctx, gen.ClaimLeasedJobsParams{Queue: queue, Max: 1, WorkerID: 9, LeaseMs: 600_000, Token: token})
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim from %.10s: %v, %v", queue, rows, err)
		}
		cancelAsHandedBack(t, b, runtime.JobID(rows[0].ID), token)
		return rows[0].ID
	}
	var bad int64
	withoutQueueBound(t, b, func() {
		insertLongQueueJob(t, b, 0)
		bad = askAndHandBack(longQueue, 1)
	})
	enqueue(t, b.pool, "k", map[string]int{}, runtime.WithQueue("fine"))
	good := askAndHandBack("fine", 2)

	if n, err := b.gen.ApplyCancelRequests(ctx, 10); err != nil || n != 1 {
		t.Fatalf("ApplyCancelRequests: %d, %v; want job %d cancelled and job %d left", n, err, good, bad)
	}
	if j := b.job(t, runtime.JobID(good)); j.Status != testdb.PgtaskJobStatusCancelled {
		t.Errorf("job %d is %s, want cancelled", good, j.Status)
	}
	if j := b.job(t, runtime.JobID(bad)); j.Status != testdb.PgtaskJobStatusQueued {
		t.Errorf("the row that breaks the bound is %s, want left queued", j.Status)
	}
	if n, err := b.gen.ApplyCancelRequests(ctx, 10); err != nil || n != 0 {
		t.Fatalf("ApplyCancelRequests again: %d, %v; want nothing left to do", n, err)
	}
}

// Groups whose finished head did not move on are moved on past a group
// whose next job's row breaks a check added NOT VALID after it was stored:
// that group stays as it is.
func TestFinishedGroupsMoveOnPastARowThatBreaksAConstraint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	stuckHead := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithQueue("fine"), runtime.WithGroup("g"))
	if err := b.q.DropUniqueKeyBound(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := b.gen.InsertJobs(ctx, gen.InsertJobsParams{
		Payloads: []json.RawMessage{json.RawMessage(`{}`)}, Settings: []int32{1}, Groups: []int32{1},
		Kinds: []string{"k"}, Queues: []string{"fine"}, Priorities: []int16{0}, AgingMs: []int32{0}, MaxAttempts: []int32{3},
		FailBlocksGroup: []bool{false}, RunAt: []string{""}, DelayUs: []int64{0},
		GroupQueues: []string{"fine"}, GroupKeys: []string{"g"},
		UniqueKeys: []string{strings.Repeat("u", 1400)}, UniqueWindowsUs: []int64{0}, UniqueStatuses: []string{"scheduled,queued,started"},
	})
	if err != nil {
		t.Fatal(err)
	}
	bad := r.Ids[0]
	if err := b.q.RestoreUniqueKeyBoundNotValid(ctx); err != nil {
		t.Fatal(err)
	}
	enqueue(t, b.pool, "k", map[string]int{}, runtime.WithQueue("fine"), runtime.WithGroup("h"))
	next := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithQueue("fine"), runtime.WithGroup("h"))

	// Both heads succeed, and their groups are left for maintenance to move on.
	rows, err := b.gen.ClaimLeasedJobs(ctx, gen.ClaimLeasedJobsParams{Queue: "fine", Max: 2, WorkerID: 9, LeaseMs: 600_000, Token: 1})
	if err != nil || len(rows) != 2 {
		t.Fatalf("claim: %v, %v; want both heads", rows, err)
	}
	if n, err := b.gen.CompleteJobs(ctx, gen.CompleteJobsParams{Ids: []int64{rows[0].ID, rows[1].ID}, Attempts: []int32{1, 1},
		Results: []json.RawMessage{nil, nil}}); err != nil || n != 2 {
		t.Fatalf("complete: %d, %v", n, err)
	}

	if n, err := b.gen.AdvanceFinishedGroups(ctx, 10); err != nil || n != 1 {
		t.Fatalf("AdvanceFinishedGroups: %d, %v; want group h moved on and group g left", n, err)
	}
	if j := b.job(t, next); !j.IsHead || j.Status != testdb.PgtaskJobStatusQueued {
		t.Errorf("group h's next job: head %v, %s; want the runnable head", j.IsHead, j.Status)
	}
	if j := b.job(t, runtime.JobID(bad)); j.IsHead {
		t.Errorf("the row that breaks the bound was made its group's head")
	}
	if j := b.job(t, stuckHead); !j.IsHead {
		t.Errorf("group g's finished head was unmarked though the group could not move on")
	}
}
