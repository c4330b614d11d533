package runtime_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// A wide fan-out whose root fails for good while workers in both modes
// run the workflow's other steps: none of the root's dependents starts,
// each is cancelled, and the steps of the other branch all run once.
func TestWorkflowWideFanOutFailing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("wide")
	root := wf.Add(req("fails"))
	other := wf.Add(req("ok"))
	var doomed, fine []runtime.Step
	for range 300 {
		doomed = append(doomed, wf.Add(req("ok"), runtime.After(root)))
		fine = append(fine, wf.Add(req("ok"), runtime.After(other)))
	}
	var mu sync.Mutex
	started := map[runtime.JobID]int{}
	count := func(ctx context.Context, job *runtime.Job) error {
		mu.Lock()
		started[job.ID]++
		mu.Unlock()
		return nil
	}
	regs := []runtime.Registration{
		{Kind: "ok", Handler: count},
		{Kind: "fails", Handler: func(ctx context.Context, job *runtime.Job) error {
			time.Sleep(50 * time.Millisecond)
			return runtime.NoRetry(errors.New("broken"))
		}},
	}
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: mode, Concurrency: 4}},
			MaintenanceInterval: 50 * time.Millisecond}, regs...)
	}
	id, err := wf.Enqueue(ctx, b.pool)
	if err != nil {
		t.Fatal(err)
	}
	s := waitWorkflowProgress(t, b, id, 30*time.Second)
	if s.Status != runtime.WorkflowFailed || s.Failed != 1 || s.Cancelled != len(doomed) || s.Succeeded != len(fine)+1 {
		t.Fatalf("workflow %+v", s)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, d := range doomed {
		if started[d.JobID()] != 0 {
			t.Fatalf("dependent %d of the failed root started", d.JobID())
		}
		if j := b.job(t, d.JobID()); j.Status != testdb.PgtaskJobStatusCancelled {
			t.Fatalf("dependent %d of the failed root is %s", d.JobID(), j.Status)
		}
	}
	for _, f := range fine {
		if started[f.JobID()] != 1 {
			t.Fatalf("step %d started %d times", f.JobID(), started[f.JobID()])
		}
	}
}

// An operator's retry of a failed parent races the finisher of the
// child's other parent: whatever order they take, the child runs once,
// after both parents succeeded.
func TestWorkflowRetryRacesAFinisher(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	type trio struct{ p1, p2, c runtime.Step }
	var trios []trio
	wf := runtime.NewWorkflow("retry-race")
	for range 20 {
		p1 := wf.Add(req("x"))
		p2 := wf.Add(req("x"))
		trios = append(trios, trio{p1, p2, wf.Add(req("x"), runtime.After(p1), runtime.After(p2))})
	}
	enqueueIdle(t, b, wf)
	for _, tr := range trios {
		// p1 fails for good, and cancels c.
		if _, err := b.q.FinishJobAs(ctx, testdb.FinishJobAsParams{ID: int64(tr.p1.JobID()), Status: testdb.PgtaskJobStatusFailed}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(trios))
	for _, tr := range trios {
		wg.Go(func() {
			if _, err := runtime.RetryJob(ctx, b.pool, tr.p1.JobID()); err != nil {
				errs <- err
			}
		})
		wg.Go(func() {
			if _, err := b.q.FinishJobAs(ctx, testdb.FinishJobAsParams{ID: int64(tr.p2.JobID()), Status: testdb.PgtaskJobStatusSucceeded}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// A finisher that found the child's row taken by the retry left a
	// note: maintenance applies it.
	if _, err := b.q.ApplyWorkflowNotesNow(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tr := range trios {
		// The child waits for its retried parent alone now.
		w, err := b.q.WorkflowWait(ctx, int64(tr.c.JobID()))
		if err != nil {
			t.Fatal(err)
		}
		if w.Remaining != 1 || w.CancelledBy != 0 {
			t.Fatalf("child %d waits for %d parents, cancelled by %d; want 1 and none", tr.c.JobID(), w.Remaining, w.CancelledBy)
		}
		if j := b.job(t, tr.c.JobID()); j.Status != testdb.PgtaskJobStatusScheduled {
			t.Fatalf("child %d is %s, want parked", tr.c.JobID(), j.Status)
		}
	}
}
