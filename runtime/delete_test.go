package runtime_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// An operator's DELETE of a group's head (a blocking failure among the
// finished jobs, or a pending head) moves the group on instead of leaving
// it pointing at a row that is gone, waiting forever.
func TestDeletingAHeadMovesItsGroupOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var mu sync.Mutex
	var ran []runtime.JobID
	startWorker(t, b.url, runtime.Config{},
		runtime.Registration{Kind: "fail", Handler: func(context.Context, *runtime.Job) error {
			return runtime.NoRetry(errors.New("no"))
		}},
		runtime.Registration{Kind: "ok", Handler: func(_ context.Context, job *runtime.Job) error {
			mu.Lock()
			defer mu.Unlock()
			ran = append(ran, job.ID)
			return nil
		}})

	blocker := enqueue(t, b.pool, "fail", map[string]int{}, runtime.WithGroup("g"), runtime.WithFailBlocksGroup(true))
	behind := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithGroup("g"))
	b.waitStatus(t, blocker, 10*time.Second, testdb.PgtaskJobStatusFailed)
	time.Sleep(200 * time.Millisecond)
	if j := b.job(t, behind); j.Status != testdb.PgtaskJobStatusQueued {
		t.Fatalf("the job behind a blocking failure is %s, want queued", j.Status)
	}
	if n, err := b.q.DeleteFinishedJobs(ctx); err != nil || n != 1 {
		t.Fatalf("delete finished jobs: %d, %v", n, err)
	}
	b.waitStatus(t, behind, 10*time.Second, testdb.PgtaskJobStatusSucceeded)

	// A pending head deleted: the job behind it becomes the head and runs.
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := enqueue(t, tx, "ok", map[string]int{}, runtime.WithGroup("h"), runtime.WithDelay(time.Hour))
	second := enqueue(t, tx, "ok", map[string]int{}, runtime.WithGroup("h"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := b.q.DeleteJob(ctx, int64(first)); err != nil || n != 1 {
		t.Fatalf("delete the pending head: %d, %v", n, err)
	}
	b.waitStatus(t, second, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
}

// A head deleted while an enqueue into its group is in flight does not wait
// for it (it would hold the deleted rows' locks while waiting, which an
// advancing worker may need): the group is left for maintenance, which moves
// it on to the new job once the enqueue commits.
func TestDeletingAHeadDuringAnEnqueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	head := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithGroup("g"))

	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	next := enqueue(t, tx, "ok", map[string]int{}, runtime.WithGroup("g"))

	deleted := make(chan error, 1)
	go func() {
		_, err := b.q.DeleteJob(ctx, int64(head))
		deleted <- err
	}()
	select {
	case err := <-deleted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the delete waited for the enqueue in flight")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.gen.AdvanceFinishedGroups(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if j := b.job(t, next); !j.IsHead {
		t.Fatalf("job %d is not its group's head after maintenance", next)
	}
	g, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: runtime.DefaultQueue, GroupKey: "g"})
	if err != nil || g.HeadID != int64(next) {
		t.Fatalf("group g: %+v, %v; want head %d", g, err, next)
	}
}

// TRUNCATE of the jobs takes the groups with it, so a group enqueued into
// afterwards starts afresh and runs.
func TestTruncatingJobsForgetsGroups(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithGroup("g"))
	if err := b.q.TruncateJobs(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: runtime.DefaultQueue, GroupKey: "g"}); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("group g after TRUNCATE: %v, want no row", err)
	}
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "ok", Handler: func(context.Context, *runtime.Job) error { return nil }})
	id := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithGroup("g"))
	b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
}
