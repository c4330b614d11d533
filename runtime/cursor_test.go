package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// While another session's snapshot pins the vacuum horizon, the claim
// index keeps an entry for every head claimed since, and a claim that looks
// behind its cursor steps over them. A claim that comes up short looks back
// only from its floor, so it does not read the entries of the heads claimed
// before the floor again; only a look back from the start does.
func TestShortClaimsDoNotReadDeadEntriesBehindTheirFloor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pin, err := b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer pin.Rollback(ctx) //nolint:errcheck // it only read
	if _, err := testdb.New(pin).PinHorizon(ctx); err != nil {
		t.Fatal(err)
	}

	const claimed = 2000
	reqs := make([]runtime.EnqueueRequest, claimed)
	for i := range reqs {
		reqs[i] = runtime.EnqueueRequest{Kind: "seq", Payload: mustJSON(t, seqPayload{Seq: i})}
	}
	if _, err := runtime.EnqueueMany(ctx, b.pool, reqs); err != nil {
		t.Fatal(err)
	}
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	g, q := gen.New(conn), testdb.New(conn)
	// Claims in turn, each starting after the last head the one before
	// found, as a worker's do.
	var last gen.ClaimJobsRow
	claim := func(floor pgtype.Int8, max int32) []gen.ClaimJobsRow {
		t.Helper()
		p := gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: max, WorkerID: 1, FloorID: floor}
		if last.ID != 0 {
			p.AfterPriority = pgtype.Int2{Int16: last.Priority, Valid: true}
			p.AfterID = pgtype.Int8{Int64: last.ID, Valid: true}
		}
		rows, err := g.ClaimJobs(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	for n := 0; n < claimed; {
		rows := claim(pgtype.Int8{}, 100)
		if len(rows) == 0 {
			t.Fatalf("claimed %d of %d jobs", n, claimed)
		}
		n += len(rows)
		last = rows[len(rows)-1]
		if !last.Scanned {
			t.Fatalf("head %d, found by the claim's scan, is not marked as scanned", last.ID)
		}
	}
	reads := func() int64 {
		t.Helper()
		// The first call flushes this session's counts; the second reads
		// them.
		if _, err := q.ClaimIndexReads(ctx); err != nil {
			t.Fatal(err)
		}
		r, err := q.ClaimIndexReads(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	shortClaim := func(floor pgtype.Int8) int64 {
		t.Helper()
		enqueue(t, b.pool, "seq", seqPayload{Seq: -1})
		before := reads()
		rows := claim(floor, 10)
		after := reads()
		if len(rows) != 1 {
			t.Fatalf("claimed %d jobs, want the one new job", len(rows))
		}
		last = rows[0]
		return after - before
	}

	fromFloor := shortClaim(pgtype.Int8{Int64: last.ID, Valid: true})
	fromStart := shortClaim(pgtype.Int8{})
	t.Logf("claim index entries read by a short claim looking back from its floor: %d; from the start: %d", fromFloor, fromStart)
	if fromStart < claimed {
		t.Fatalf("a look back from the start read %d entries, fewer than the %d dead ones: the horizon is not pinned", fromStart, claimed)
	}
	if fromFloor > 20 {
		t.Fatalf("a short claim read %d claim index entries, with %d dead ones behind its floor", fromFloor, claimed)
	}
}

// A busy group's heads are promoted by the worker that finishes the job
// before, and its claim takes them by id. While another session pins the
// vacuum horizon, every head claimed leaves a dead entry in the claim index;
// a cursor that stayed where it was while the group moved on would make
// each claim's scan ahead of it step over all of them, so the drain slowed
// with every job. The entries a drain reads stay in proportion to its jobs.
func TestABusyGroupUnderAPinnedHorizonKeepsItsClaimsShort(t *testing.T) {
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			pin, err := b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
			if err != nil {
				t.Fatal(err)
			}
			defer pin.Rollback(ctx) //nolint:errcheck // it only read
			if _, err := testdb.New(pin).PinHorizon(ctx); err != nil {
				t.Fatal(err)
			}
			const jobs = 4000
			enqueueGroup(t, b, runtime.DefaultQueue, "hot", jobs)
			before, err := b.q.ClaimIndexReads(ctx)
			if err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: mode}}},
				runtime.Registration{Kind: "seq", Handler: func(context.Context, *runtime.Job) error { return nil }})
			for _, j := range b.waitQueueDone(t, runtime.DefaultQueue, 120*time.Second) {
				if j.Status != testdb.PgtaskJobStatusSucceeded {
					t.Fatalf("job %d is %s", j.ID, j.Status)
				}
			}
			took := time.Since(began)
			after, err := b.q.ClaimIndexReads(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// A claim reads the entries from its cursor on: the group's
			// head and a few dead ones, a couple a job. A look back from
			// the start, every runtime.LookBackEvery, reads them all.
			looks := float64(took) / float64(runtime.LookBackEvery)
			allowed := int64(jobs * (3 + looks))
			t.Logf("claim index entries read: %d for %d jobs in %s (%.1f a job; allowed %d)", after-before, jobs,
				took.Round(time.Millisecond), float64(after-before)/jobs, allowed)
			if after-before > allowed {
				t.Fatalf("the drain read %d claim index entries, more than %d: its claims step over the dead heads again and again",
					after-before, allowed)
			}
		})
	}
}

// A held-mode claim keeps one admitted head of a limit key and drops the
// key's others, leaving them to other runners. A dropped head may lie
// behind the cursor the claim moves past it, where no claim looks until a
// look back from the start is due (5 s): the claim announces the first one
// on the pgtask_behind channel, as other heads made runnable behind a
// cursor are, so that a worker's claims look back to it at once.
func TestAHeadAClaimDropsIsAnnounced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const queue = "dropped"
	opts := []runtime.EnqueueOption{runtime.WithQueue(queue), runtime.WithLimit("k", 2)}
	first := enqueue(t, b.pool, "seq", seqPayload{Seq: 0}, opts...)
	second := enqueue(t, b.pool, "seq", seqPayload{Seq: 1}, opts...)
	after := enqueue(t, b.pool, "seq", seqPayload{Seq: 2}, runtime.WithQueue(queue))
	lc := listenFor(t, b)

	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	rows, err := gen.New(tx).ClaimJobs(ctx, gen.ClaimJobsParams{Queue: queue, Max: 10, WorkerID: 1})
	if err != nil {
		t.Fatal(err)
	}
	var got []runtime.JobID
	for _, r := range rows {
		got = append(got, runtime.JobID(r.ID))
	}
	if len(got) != 2 || got[0] != first || got[1] != after {
		t.Fatalf("claimed %v, want %d (the key's first head) and %d; %d dropped", got, first, after, second)
	}
	if !rows[1].Scanned {
		t.Fatalf("job %d, after the dropped head, does not move the cursor: the test shows nothing", after)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for {
		n, err := lc.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("no announcement of the dropped head %d behind the cursor: %v", second, err)
		}
		if n.Channel != "pgtask_behind" {
			continue
		}
		id, q := runtime.ParseWake(n.Payload)
		if q == queue && id == int64(second) {
			return
		}
		t.Logf("heard %q on %s", n.Payload, n.Channel)
	}
}
