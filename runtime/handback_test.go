package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
)

// listenFor connects a session listening for wake-ups, as an idle worker's
// listener does.
func listenFor(t *testing.T, b *bundle) *pgx.Conn {
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
	return n.Payload
}

// A runnable head handed back unstarted (a worker shutting down, either
// mode) wakes idle workers, so others take it at once instead of at their
// next poll; the jobs of a run behind a head wake no one.
func TestHandBackOfARunnableHeadWakesIdleWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	held := enqueue(t, b.pool, "seq", seqPayload{Seq: 0})
	lc := listenFor(t, b)

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
	r, err := q.ReleaseJobs(ctx, gen.ReleaseJobsParams{OwnerPid: int32(conn.Conn().PgConn().PID()), Ids: []int64{int64(held)}})
	if err != nil || r.Released != 1 || r.Woken != 1 {
		t.Fatalf("held hand-back: %+v, %v; want 1 released, 1 queue woken", r, err)
	}
	if got := wakeUp(t, lc, 5*time.Second); got != runtime.DefaultQueue {
		t.Fatalf("after the held hand-back the listener heard %q; want a wake-up for %s", got, runtime.DefaultQueue)
	}

	// Lease mode: the group's head and the run behind it, then the follower
	// alone handed back (the head still runs), then the head.
	const queue = "handback"
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
	back := func(id runtime.JobID) gen.ReleaseLeasedJobsRow {
		t.Helper()
		r, err := b.gen.ReleaseLeasedJobs(ctx, gen.ReleaseLeasedJobsParams{Ids: []int64{int64(id)}, Attempts: []int32{1}, Tokens: []int64{7}})
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
