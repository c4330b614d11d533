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

// readyKeys makes n keys of limit 1 in queue, named prefix0.., each with
// a free slot and one job of kind waiting for it (ready, in
// limit_keys_ready), or, stale, with its waiting job deleted since: the
// key stays marked waiting until a claim looks at it. Returns the waiting
// jobs' ids.
func readyKeys(t *testing.T, b *bundle, queue, prefix, kind string, n int, stale bool) []int64 {
	t.Helper()
	ctx := context.Background()
	var reqs []runtime.EnqueueRequest
	for i := range n {
		for range 2 {
			r := runtime.EnqueueRequest{Kind: kind, Payload: []byte(`{}`)}
			r.Apply(runtime.WithQueue(queue), runtime.WithLimit(fmt.Sprint(prefix, i), 1))
			reqs = append(reqs, r)
		}
	}
	ids, err := runtime.EnqueueMany(ctx, b.pool, reqs)
	if err != nil {
		t.Fatal(err)
	}
	var waiting []int64
	for i := 0; i < len(ids); i += 2 {
		if _, err := b.q.DeleteJob(ctx, int64(ids[i])); err != nil {
			t.Fatal(err)
		}
		if stale {
			if _, err := b.q.DeleteJob(ctx, int64(ids[i+1])); err != nil {
				t.Fatal(err)
			}
		}
		waiting = append(waiting, int64(ids[i+1]))
	}
	return waiting
}

// claimIn claims up to max jobs of queue and kinds in tx, held (lease
// false) or with a lease, and returns the ids claimed.
func claimIn(t *testing.T, tx pgx.Tx, queue string, max int32, kinds []string, lease bool) []int64 {
	t.Helper()
	ctx := context.Background()
	var ids []int64
	if lease {
		rows, err := gen.New(tx).ClaimLeasedJobs(ctx, gen.ClaimLeasedJobsParams{
			Queue: queue, Max: max, WorkerID: 1, LeaseMs: 60000, Token: 1, RunMax: 1, Kinds: kinds})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			ids = append(ids, r.ID)
		}
		return ids
	}
	rows, err := gen.New(tx).ClaimJobs(ctx, gen.ClaimJobsParams{Queue: queue, Max: max, WorkerID: 1, Kinds: kinds})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return ids
}

// A claim looks at a bounded number of ready keys that give it nothing:
// 300 keys whose waiting jobs were deleted stay marked waiting, and a held
// claim of 4 jobs writes at most 2 * 4 + 2 of their rows (clearing them),
// not all 300; the claims that follow clear the rest a few at a time and
// reach the one key with a job waiting behind them.
func TestAClaimLooksAtFewStaleReadyKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	readyKeys(t, b, "st", "gone", "limited", 300, true)
	live := readyKeys(t, b, "st", "live", "limited", 1, false)[0]
	if n, err := b.q.ReadyLimitKeys(ctx, "st"); err != nil || n != 301 {
		t.Fatalf("%d ready keys (%v), want 301", n, err)
	}
	for claims := 1; ; claims++ {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := claimIn(t, tx, "st", 4, []string{"limited"}, false)
		written, err := testdb.New(tx).LimitKeysWrittenHere(ctx, "st")
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if written > 10 {
			t.Fatalf("claim %d wrote %d keys' rows, want at most 10", claims, written)
		}
		if len(got) > 0 {
			if len(got) != 1 || got[0] != live {
				t.Fatalf("claim %d took %v, want the live key's job %d", claims, got, live)
			}
			t.Logf("the live key's job in claim %d", claims)
			break
		}
		if claims > 40 {
			t.Fatalf("%d claims and the live key's job is not taken", claims)
		}
	}
}

// Keys whose waiting jobs are all of kinds a worker does not handle are
// neither written nor in the way of its claims, in either mode: with 300
// such keys ready ahead of it, a claim of kind b takes the job of the one
// key of kind b, writing that key's row alone.
func TestClaimsPassOverKeysOfOtherKinds(t *testing.T) {
	t.Parallel()
	for _, lease := range []bool{false, true} {
		t.Run(fmt.Sprintf("lease=%v", lease), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			readyKeys(t, b, "kd", "a", "kind_a", 300, false)
			want := readyKeys(t, b, "kd", "b", "kind_b", 1, false)[0]
			tx, err := b.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck // the claim is not kept
			got := claimIn(t, tx, "kd", 4, []string{"kind_b"}, lease)
			written, err := testdb.New(tx).LimitKeysWrittenHere(ctx, "kd")
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0] != want {
				t.Errorf("a claim of kind b took %v, want job %d", got, want)
			}
			if written > 1 {
				t.Errorf("a claim of kind b wrote %d keys' rows, want 1", written)
			}
		})
	}
}

// A claim that passes over a waiting job of a key (locked by someone else
// here) does not move the key's frontier past it, in either mode, so the
// key's next claims find it before the jobs behind it: job 1 of four
// waiting is locked while a claim takes job 2, and the key's frontier
// stays before job 1.
func TestAClaimsFrontierStaysBeforeAJobItPassedOver(t *testing.T) {
	t.Parallel()
	for _, lease := range []bool{false, true} {
		t.Run(fmt.Sprintf("lease=%v", lease), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			var reqs []runtime.EnqueueRequest
			for range 5 {
				r := runtime.EnqueueRequest{Kind: "limited", Payload: []byte(`{}`)}
				r.Apply(runtime.WithQueue("fr"), runtime.WithLimit("k", 1))
				reqs = append(reqs, r)
			}
			ids, err := runtime.EnqueueMany(ctx, b.pool, reqs)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.q.DeleteJob(ctx, int64(ids[0])); err != nil {
				t.Fatal(err)
			}
			lock, err := b.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Rollback(ctx) //nolint:errcheck // only a lock
			if err := testdb.New(lock).LockJobRow(ctx, int64(ids[1])); err != nil {
				t.Fatal(err)
			}
			tx, err := b.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck // the claim is not kept
			got := claimIn(t, tx, "fr", 1, []string{"limited"}, lease)
			if len(got) != 1 || got[0] != int64(ids[2]) {
				t.Fatalf("the claim took %v, want job %d (job %d locked)", got, ids[2], ids[1])
			}
			f, err := testdb.New(tx).LimitKeyFrontier(ctx, testdb.LimitKeyFrontierParams{Queue: "fr", LimitKey: "k"})
			if err != nil {
				t.Fatal(err)
			}
			if f.FrontierID != (pgtype.Int8{}) && f.FrontierID.Int64 >= int64(ids[1]) {
				t.Errorf("the key's frontier is job %d, past job %d that the claim passed over", f.FrontierID.Int64, ids[1])
			}
		})
	}
}

// A key freed by a settle whose own claim does not take its job (of a kind
// that worker does not handle) wakes the queue's other workers: an idle
// worker of kind y, polling once an hour, starts the key's waiting job of
// kind y within seconds of a worker of kind x finishing the key's job that
// held its one slot.
func TestAFreedKeyItsSettlesClaimLeftWakesOtherWorkers(t *testing.T) {
	t.Parallel()
	for _, lease := range []bool{false, true} {
		t.Run(fmt.Sprintf("lease=%v", lease), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			lim := []runtime.EnqueueOption{runtime.WithQueue("wk"), runtime.WithLimit("k", 1)}
			first := enqueue(t, b.pool, "x", map[string]int{}, lim...)
			second := enqueue(t, b.pool, "y", map[string]int{}, lim...)
			qc := runtime.QueueConfig{Concurrency: 2, Mode: runtime.ModeHeld}
			if lease {
				qc.Mode = runtime.ModeLease
			}
			cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{"wk": qc}, PollInterval: time.Hour}
			startWorker(t, b.url, cfg, runtime.Registration{Kind: "y", Queue: "wk", Handler: func(context.Context, *runtime.Job) error { return nil }})
			time.Sleep(300 * time.Millisecond)
			startWorker(t, b.url, cfg, runtime.Registration{Kind: "x", Queue: "wk", Handler: func(context.Context, *runtime.Job) error { return nil }})
			b.waitStatus(t, first, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
			b.waitStatus(t, second, 5*time.Second, testdb.PgtaskJobStatusSucceeded)
		})
	}
}

// A claim reads a key's waiting jobs from its frontier on, however the
// planner's statistics look: with 2,000 jobs of a key of limit 100 run
// before (finished, their rows kept), 18,000 waiting, and the table
// analyzed while every job in it was of that key, a claim of 50 in either
// mode reads a few rows per job it takes and a few blocks of the index of
// waiting jobs, not every job of the key run before or waiting after. Statistics that say a key
// holds the whole table once had the looks at its waiting jobs planned as
// sequential scans of the table, each claim reading every job kept, which
// slowed a drain under a limit that does not bind to a fifth.
func TestAClaimReadsAKeysJobsFromItsFrontier(t *testing.T) {
	t.Parallel()
	for _, lease := range []bool{false, true} {
		t.Run(fmt.Sprintf("lease=%v", lease), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			var reqs []runtime.EnqueueRequest
			for range 20_000 {
				r := runtime.EnqueueRequest{Kind: "limited", Payload: []byte(`{}`)}
				r.Apply(runtime.WithQueue("fz"), runtime.WithLimit("", 100))
				reqs = append(reqs, r)
			}
			if _, err := runtime.EnqueueMany(ctx, b.pool, reqs); err != nil {
				t.Fatal(err)
			}
			if err := b.q.AnalyzeJobs(ctx); err != nil {
				t.Fatal(err)
			}
			kinds := []string{"limited"}
			for ran := 0; ran < 2000; {
				tx, err := b.pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got := claimIn(t, tx, "fz", 100, kinds, true)
				if len(got) == 0 {
					t.Fatalf("a claim took nothing after %d jobs ran", ran)
				}
				for _, id := range got {
					if _, err := testdb.New(tx).FinishJobAs(ctx, testdb.FinishJobAsParams{ID: id, Status: testdb.PgtaskJobStatusSucceeded}); err != nil {
						t.Fatal(err)
					}
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				ran += len(got)
			}
			tx, err := b.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck // the claim is not kept
			tq := testdb.New(tx)
			before, err := tq.JobRowsReadHere(ctx)
			if err != nil {
				t.Fatal(err)
			}
			blocksBefore, err := tq.WaitingIndexBlocksHere(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := claimIn(t, tx, "fz", 50, kinds, lease)
			after, err := tq.JobRowsReadHere(ctx)
			if err != nil {
				t.Fatal(err)
			}
			blocksAfter, err := tq.WaitingIndexBlocksHere(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if blocks := blocksAfter - blocksBefore; blocks > 20 {
				t.Errorf("a claim of %d jobs read %d blocks of the index of waiting jobs, want at most 20: it read the jobs waiting after it", len(got), blocks)
			} else {
				t.Logf("a claim of %d jobs read %d blocks of the index of waiting jobs", len(got), blocks)
			}
			fetched, scanned := after.Fetched-before.Fetched, after.Scanned-before.Scanned
			t.Logf("a claim of %d jobs fetched %d rows through indexes and scanned %d", len(got), fetched, scanned)
			if len(got) == 0 {
				t.Fatal("the claim took nothing")
			}
			if scanned > 0 || fetched > 10*int64(len(got))+100 {
				t.Errorf("a claim of %d jobs read %d rows of the jobs table (%d scanned), want at most %d: it read jobs that ran before",
					len(got), fetched+scanned, scanned, 10*len(got)+100)
			}
		})
	}
}
