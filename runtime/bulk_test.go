package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// Bulk operations by filter, across more than one batch: count, list in
// pages, cancel, retry and delete, with progress; a group whose jobs are
// cancelled is not wedged; Stats agrees.
func TestBulkOperationsByFilter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	reqs := make([]runtime.EnqueueRequest, 1200)
	for i := range reqs {
		reqs[i] = runtime.EnqueueRequest{Kind: "a", Payload: json.RawMessage(`{}`), EnqueueOptions: runtime.EnqueueOptions{Queue: "q1"}}
	}
	reqs = append(reqs, runtime.EnqueueRequest{Kind: "b", Payload: json.RawMessage(`{}`), EnqueueOptions: runtime.EnqueueOptions{Queue: "q1"}})
	for range 3 {
		reqs = append(reqs, runtime.EnqueueRequest{Kind: "a", Payload: json.RawMessage(`{}`), EnqueueOptions: runtime.EnqueueOptions{Queue: "q2", Group: "g"}})
	}
	if _, err := runtime.EnqueueMany(ctx, b.pool, reqs); err != nil {
		t.Fatal(err)
	}
	q1a := runtime.JobFilter{Queue: "q1", Kind: "a"}
	count := func(f runtime.JobFilter) int64 {
		t.Helper()
		n, err := runtime.CountJobs(ctx, b.pool, f)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(q1a); n != 1200 {
		t.Fatalf("count %d, want 1200", n)
	}
	var listed []runtime.JobID
	for after := runtime.JobID(0); ; {
		page, err := runtime.ListJobs(ctx, b.pool, q1a, after, 500)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, j := range page {
			listed = append(listed, j.ID)
		}
		after = page[len(page)-1].ID
	}
	if len(listed) != 1200 || !slices.IsSorted(listed) || len(slices.Compact(slices.Clone(listed))) != 1200 {
		t.Fatalf("pages listed %d jobs, want 1200 distinct in order", len(listed))
	}

	var steps [][2]int
	n, err := runtime.CancelJobs(ctx, b.pool, q1a, func(seen, changed int) { steps = append(steps, [2]int{seen, changed}) })
	if err != nil || n != 1200 {
		t.Fatalf("CancelJobs: %d, %v", n, err)
	}
	if want := [][2]int{{1000, 1000}, {1200, 1200}}; !slices.Equal(steps, want) {
		t.Fatalf("progress %v, want %v", steps, want)
	}
	if c := count(runtime.JobFilter{Queue: "q1", Statuses: []runtime.Status{runtime.StatusQueued}}); c != 1 {
		t.Fatalf("%d queued jobs left in q1, want the one of kind b", c)
	}
	if n, err := runtime.RetryJobs(ctx, b.pool, runtime.JobFilter{Queue: "q1", Statuses: []runtime.Status{runtime.StatusCancelled}}, nil); err != nil || n != 1200 {
		t.Fatalf("RetryJobs: %d, %v", n, err)
	}
	if c := count(runtime.JobFilter{Queue: "q1", Statuses: []runtime.Status{runtime.StatusQueued}}); c != 1201 {
		t.Fatalf("%d queued after the retry, want 1201", c)
	}

	// A group's jobs cancelled: the group moves on, and a new job of it runs.
	if n, err := runtime.CancelJobs(ctx, b.pool, runtime.JobFilter{Queue: "q2", Group: "g"}, nil); err != nil || n != 3 {
		t.Fatalf("cancel the group's jobs: %d, %v", n, err)
	}
	if _, err := runtime.PauseQueue(ctx, b.pool, "q1"); err != nil {
		t.Fatal(err)
	}
	startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{"q2": {}}},
		runtime.Registration{Kind: "a", Handler: func(context.Context, *runtime.Job) error { return runtime.NoRetry(errors.New("no")) }})
	blocking := enqueue(t, b.pool, "a", map[string]int{}, runtime.WithQueue("q2"), runtime.WithGroup("g"), runtime.WithFailBlocksGroup(true))
	b.waitStatus(t, blocking, 10*time.Second, testdb.PgtaskJobStatusFailed)

	if n, err := runtime.DeleteJobs(ctx, b.pool, runtime.JobFilter{Queue: "q2"}, nil); err != nil || n != 3 {
		t.Fatalf("DeleteJobs: %d, %v; want the 3 cancelled, not the failure that blocks its group", n, err)
	}
	stats, err := runtime.Stats(ctx, b.pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 2 || stats[0].Queue != "q1" || !stats[0].Paused || stats[0].Counts[runtime.StatusQueued] != 1201 || stats[0].OldestWait <= 0 ||
		stats[1].Queue != "q2" || stats[1].BlockedGroups != 1 || stats[1].Counts[runtime.StatusFailed] != 1 {
		t.Fatalf("stats %+v", stats)
	}
	if _, err := runtime.CountJobs(ctx, b.pool, runtime.JobFilter{Statuses: []runtime.Status{"lost"}}); err == nil {
		t.Fatal("a status that is not one was accepted")
	}
}
