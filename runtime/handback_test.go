package runtime_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// listenFor connects a session listening for wake-ups, as an idle worker's
// listener does; it holds the idle locks of idleQueues, as that listener
// does for the queues with an idle runner, so that their enqueues notify.
func listenFor(t *testing.T, b *bundle, idleQueues ...string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	lc, err := pgx.Connect(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close(context.Background()) })
	if err := gen.New(lc).Listen(ctx); err != nil {
		t.Fatal(err)
	}
	if err := gen.New(lc).ListenBehind(ctx); err != nil {
		t.Fatal(err)
	}
	for _, q := range idleQueues {
		if ok, err := gen.New(lc).AnnounceIdle(ctx, q); err != nil || !ok {
			t.Fatalf("announce idle runners of %s: %v, %v", q, ok, err)
		}
	}
	return lc
}

// wakeUp reports the queue of the next wake-up lc hears within wait, or "".
func wakeUp(t *testing.T, lc *pgx.Conn, wait time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	n, err := lc.WaitForNotification(ctx)
	if err != nil {
		return ""
	}
	// A wake-up may name its first job's id before the queue.
	_, queue := runtime.ParseWake(n.Payload)
	return queue
}

// A runnable head handed back unstarted (a worker shutting down, either
// mode) wakes idle workers, so others take it at once instead of at their
// next poll; the jobs of a run behind a head wake no one.
func TestHandBackOfARunnableHeadWakesIdleWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	held := enqueue(t, b.pool, "seq", seqPayload{Seq: 0})
	const queue = "handback"
	lc := listenFor(t, b, queue)

	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	q := gen.New(conn)
	rows, err := q.ClaimJobs(ctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: 1, Token: pgtype.Int8{Int64: 1, Valid: true}})
	if err != nil || len(rows) != 1 || rows[0].ID != int64(held) {
		t.Fatalf("held claim: %+v, %v; want job %d", rows, err, held)
	}
	r, err := q.HandBack(ctx, gen.HandBackParams{
		Ids: []int64{int64(held)}, OwnerPid: pgtype.Int4{Int32: int32(conn.Conn().PgConn().PID()), Valid: true}, WorkerID: pgtype.Int4{Int32: 1, Valid: true},
	})
	if err != nil || r.Released != 1 || r.Woken != 1 {
		t.Fatalf("held hand-back: %+v, %v; want 1 released, 1 queue woken", r, err)
	}
	if got := wakeUp(t, lc, 5*time.Second); got != runtime.DefaultQueue {
		t.Fatalf("after the held hand-back the listener heard %q; want a wake-up for %s", got, runtime.DefaultQueue)
	}

	// Lease mode: the group's head and the run behind it, then the follower
	// alone handed back (the head still runs), then the head.
	ids := enqueueGroup(t, b, queue, "g", 2)
	if woke := wakeUp(t, lc, 5*time.Second); woke != queue {
		t.Fatalf("the enqueue woke %q; want %s", woke, queue)
	}
	leased, err := b.gen.ClaimLeasedJobs(ctx, gen.ClaimLeasedJobsParams{
		Queue: queue, Max: 10, WorkerID: 2, LeaseMs: 60_000, Token: 7, RunMax: 10,
	})
	if err != nil || len(leased) != 2 {
		t.Fatalf("lease claim: %+v, %v; want the head and the job behind it", leased, err)
	}
	back := func(id runtime.JobID) gen.HandBackRow {
		t.Helper()
		r, err := b.gen.HandBack(ctx, gen.HandBackParams{Ids: []int64{int64(id)}, Attempts: []int32{1}, Tokens: []int64{7}})
		if err != nil || r.Released != 1 {
			t.Fatalf("hand back job %d: %+v, %v", id, r, err)
		}
		return r
	}
	if r := back(ids[1]); r.Woken != 0 {
		t.Fatalf("handing back the job behind a running head woke %d queues; want none", r.Woken)
	}
	if got := wakeUp(t, lc, 300*time.Millisecond); got != "" {
		t.Fatalf("the follower's hand-back woke %q", got)
	}
	if r := back(ids[0]); r.Woken != 1 {
		t.Fatalf("handing back the group's head woke %d queues; want 1", r.Woken)
	}
	if got := wakeUp(t, lc, 5*time.Second); got != queue {
		t.Fatalf("after the head's hand-back the listener heard %q; want %s", got, queue)
	}
}

// A lease-mode claim whose reply was lost is handed back whole, by its
// token; a job of it that an operator asked to cancel meanwhile ends
// cancelled there and then, as every hand-back does, rather than queued
// for another worker to claim and run before maintenance applies the
// request.
func TestCancelledJobOfAHandedBackLeaseClaimEndsCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	asked := enqueue(t, b.pool, "k", map[string]int{})
	other := enqueue(t, b.pool, "k", map[string]int{})
	rows, err := b.gen.ClaimLeasedJobs(ctx, gen.ClaimLeasedJobsParams{
		Queue: runtime.DefaultQueue, Max: 2, WorkerID: 3, LeaseMs: 600_000, Token: 5,
	})
	if err != nil || len(rows) != 2 {
		t.Fatalf("lease claim: %+v, %v; want both jobs", rows, err)
	}
	if ok, err := runtime.CancelJob(ctx, b.pool, asked); err != nil || !ok {
		t.Fatalf("CancelJob(%d): %v, %v", asked, ok, err)
	}
	if r, err := b.gen.HandBack(ctx, gen.HandBackParams{Tokens: []int64{5}}); err != nil || r.Released != 2 || r.Woken != 1 {
		t.Fatalf("hand back the claim: %+v, %v; want 2 jobs, 1 queue woken", r, err)
	}
	if j := b.job(t, asked); j.Status != testdb.PgtaskJobStatusCancelled || j.Attempts != 0 || j.FinishedAt == nil {
		t.Errorf("the job asked to cancel is %s, %d attempts, finished at %v; want cancelled, its attempt returned, finished",
			j.Status, j.Attempts, j.FinishedAt)
	}
	if j := b.job(t, other); j.Status != testdb.PgtaskJobStatusQueued || j.Attempts != 0 {
		t.Errorf("the other job is %s, %d attempts; want queued, its attempt returned", j.Status, j.Attempts)
	}
}

// cancelAsHandedBack asks to cancel job id, claimed with a lease by the
// claim marked token, in a transaction that commits only after that claim
// is handed back: the hand-back cannot see the request, the job is
// requeued, and the request waits for maintenance to carry it out.
func cancelAsHandedBack(t *testing.T, b *bundle, id runtime.JobID, token int64) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	if ok, err := runtime.CancelJob(ctx, tx, id); err != nil || !ok {
		t.Fatalf("CancelJob(%d): %v, %v", id, ok, err)
	}
	if r, err := b.gen.HandBack(ctx, gen.HandBackParams{Tokens: []int64{token}}); err != nil || r.Released != 1 {
		t.Fatalf("hand back job %d: %+v, %v", id, r, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if s := b.job(t, id).Status; s != testdb.PgtaskJobStatusQueued {
		t.Fatalf("job %d handed back as its cancel request was made is %s, want queued, its request waiting", id, s)
	}
}

// The hand-back of a lost held session's jobs (ids not named) takes every
// job that session of that worker claimed and no other, and wakes idle
// workers for the runnable heads it requeues, like every hand-back.
func TestHandBackOfALostSessionTakesItsJobsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	enqueue(t, b.pool, "k", map[string]int{})
	enqueue(t, b.pool, "k", map[string]int{})
	claim := func(worker int32) (pid int32, id int64) {
		t.Helper()
		// Each claim on a session of its own, held to the end.
		conn, err := b.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Release)
		rows, err := gen.New(conn).ClaimJobs(ctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: worker, Token: pgtype.Int8{Int64: int64(worker), Valid: true}})
		if err != nil || len(rows) != 1 {
			t.Fatalf("held claim by worker %d: %+v, %v; want one job", worker, rows, err)
		}
		return int32(conn.Conn().PgConn().PID()), rows[0].ID
	}
	pid1, lost := claim(1)
	pid2, kept := claim(2)
	lc := listenFor(t, b)
	session := func(pid, worker int32) gen.HandBackParams {
		return gen.HandBackParams{OwnerPid: pgtype.Int4{Int32: pid, Valid: true}, WorkerID: pgtype.Int4{Int32: worker, Valid: true}}
	}
	if r, err := b.gen.HandBack(ctx, session(pid2, 1)); err != nil || r.Released != 0 {
		t.Fatalf("hand-back of worker 1 on worker 2's session: %+v, %v; want nothing", r, err)
	}
	if r, err := b.gen.HandBack(ctx, session(pid1, 1)); err != nil || r.Released != 1 || r.Woken != 1 {
		t.Fatalf("hand-back of worker 1's session: %+v, %v; want 1 released, 1 queue woken", r, err)
	}
	if got := wakeUp(t, lc, 5*time.Second); got != runtime.DefaultQueue {
		t.Fatalf("after the lost session's hand-back the listener heard %q; want a wake-up for %s", got, runtime.DefaultQueue)
	}
	if j := b.job(t, runtime.JobID(lost)); j.Status != testdb.PgtaskJobStatusQueued || j.Attempts != 0 || j.OwnerPid.Valid {
		t.Errorf("the lost session's job is %s, %d attempts, owner %v; want queued, its attempt returned, no owner", j.Status, j.Attempts, j.OwnerPid.Int32)
	}
	if j := b.job(t, runtime.JobID(kept)); j.Status != testdb.PgtaskJobStatusStarted || j.Attempts != 1 {
		t.Errorf("the other session's job is %s, %d attempts; want started, its attempt kept", j.Status, j.Attempts)
	}
}

// A hand-back without its fence (no session or worker for the held mode,
// no token for each job for the lease mode) is refused with an error that
// says what it lacks, rather than handing back nothing, or anything, in
// silence; the claimed job stays as it was.
func TestHandBackWithoutItsFenceIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	enqueue(t, b.pool, "k", map[string]int{})
	rows, err := b.gen.ClaimLeasedJobs(ctx, gen.ClaimLeasedJobsParams{
		Queue: runtime.DefaultQueue, Max: 1, WorkerID: 3, LeaseMs: 600_000, Token: 5,
	})
	if err != nil || len(rows) != 1 {
		t.Fatalf("lease claim: %+v, %v; want one job", rows, err)
	}
	id := rows[0].ID
	for name, p := range map[string]gen.HandBackParams{
		"no fence":                 {Ids: []int64{id}},
		"a session with no worker": {OwnerPid: pgtype.Int4{Int32: 1, Valid: true}},
		"fewer tokens than jobs":   {Ids: []int64{id, id + 1}, Attempts: []int32{1, 1}, Tokens: []int64{5}},
		"no attempts for the jobs": {Ids: []int64{id}, Tokens: []int64{5}},
		"two tokens for one claim": {Tokens: []int64{5, 6}},
	} {
		r, err := b.gen.HandBack(ctx, p)
		if err == nil || !strings.Contains(err.Error(), "pgtask.hand_back") {
			t.Errorf("%s: %+v, %v; want an error from pgtask.hand_back", name, r, err)
		}
	}
	if j := b.job(t, runtime.JobID(id)); j.Status != testdb.PgtaskJobStatusStarted || j.Attempts != 1 {
		t.Errorf("the claimed job is %s, %d attempts; want started, its attempt kept", j.Status, j.Attempts)
	}
}
