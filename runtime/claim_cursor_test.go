package runtime_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// With another session's transaction open, nothing can remove or even mark
// the claim index's entries of the heads claimed since it began. A claim
// that starts at the cursor of a worker that claimed them all, on an empty
// queue, must not step over them: a steady trickle of jobs makes every
// claim come up short, and its cost grew with every job run.
func TestClaimAtCursorStepsOverNoDeadEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, b := restartableDatabase(t) // a cluster of its own: the horizon is pinned
	pin, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pin.Rollback(ctx) //nolint:errcheck // it only read
	if _, err := testdb.New(pin).PinHorizon(ctx); err != nil {
		t.Fatal(err)
	}

	const n = 2_000
	reqs := make([]runtime.EnqueueRequest, n)
	for i := range reqs {
		reqs[i] = runtime.EnqueueRequest{Kind: "k", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
		reqs[i].Apply(runtime.WithQueue("q"))
	}
	if _, err := runtime.EnqueueMany(ctx, b.pool, reqs); err != nil {
		t.Fatal(err)
	}
	var priority pgtype.Int2
	var id pgtype.Int8
	// Each claim on a new session: the statistics a session has not sent
	// yet count in what its transaction reads.
	claim := func(max int32) (rows []gen.ClaimJobsRow, entries int64) {
		conn, err := pgx.Connect(ctx, b.url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // committed below
		rows, err = gen.New(tx).ClaimJobs(ctx, gen.ClaimJobsParams{
			Queue: "q", Max: max, WorkerID: 1, AfterPriority: priority, AfterID: id, Kinds: []string{"k"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if entries, err = testdb.New(tx).ClaimIndexEntriesRead(ctx); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if len(rows) > 0 {
			last := rows[len(rows)-1]
			priority, id = pgtype.Int2{Int16: last.Priority, Valid: true}, pgtype.Int8{Int64: last.ID, Valid: true}
		}
		return rows, entries
	}
	for claimed := 0; claimed < n; {
		rows, _ := claim(100)
		if len(rows) == 0 {
			t.Fatalf("claimed %d of %d, then nothing", claimed, n)
		}
		claimed += len(rows)
	}
	for _, max := range []int32{1, 10} {
		rows, entries := claim(max)
		if len(rows) != 0 {
			t.Fatalf("claimed %d jobs of an empty queue", len(rows))
		}
		if entries > 50 {
			t.Errorf("a claim of %d at the cursor, on an empty queue, read %d claim index entries; want few, not the %d dead ones before it",
				max, entries, n)
		}
	}
}

// A job whose enqueue took its id before other jobs' and committed after
// they ran sits behind every worker's cursor. It runs all the same, in both
// modes: claims look behind the cursor after coming up dry, and from the
// beginning once a second.
func TestLateCommittedJobBehindTheCursorRuns(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			noop := func(context.Context, *runtime.Job) error { return nil }
			startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{"default": {Mode: mode, Concurrency: 4}}},
				runtime.Registration{Kind: "k", Handler: noop})
			for _, wait := range []time.Duration{0, 100 * time.Millisecond, 2 * time.Second} {
				tx, err := b.pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				late := enqueue(t, tx, "k", map[string]int{"late": 1})
				var after []runtime.JobID
				for i := range 20 {
					after = append(after, enqueue(t, b.pool, "k", map[string]int{"n": i}))
				}
				for _, id := range after {
					b.waitStatus(t, id, 5*time.Second, testdb.PgtaskJobStatusSucceeded)
				}
				time.Sleep(wait)
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				b.waitStatus(t, late, 3*time.Second, testdb.PgtaskJobStatusSucceeded)
			}
		})
	}
}
