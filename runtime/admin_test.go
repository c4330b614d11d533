package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// CancelJob leaves finished jobs alone: a failure that blocks nothing (an
// ungrouped job, or a grouped one whose group moved on) stays failed, and
// only a failure that blocks its group can be cancelled to release it.
func TestCancelJobLeavesFinishedFailuresAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	fail := func(context.Context, *runtime.Job) error { return runtime.NoRetry(errors.New("no")) }
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "fail", Handler: fail})

	ungrouped := enqueue(t, b.pool, "fail", map[string]int{})
	skipping := enqueue(t, b.pool, "fail", map[string]int{}, runtime.WithGroup("skip"))
	blocking := enqueue(t, b.pool, "fail", map[string]int{}, runtime.WithGroup("block"), runtime.WithFailBlocksGroup(true))
	for _, id := range []runtime.JobID{ungrouped, skipping, blocking} {
		b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusFailed)
	}

	for _, id := range []runtime.JobID{ungrouped, skipping} {
		ok, err := runtime.CancelJob(ctx, b.pool, id)
		if err != nil || ok {
			t.Errorf("CancelJob(%d) = %v, %v; want false for a failure that blocks nothing", id, ok, err)
		}
		if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusFailed {
			t.Errorf("job %d is %s after the refused cancel, want failed", id, j.Status)
		}
	}
	if ok, err := runtime.CancelJob(ctx, b.pool, blocking); err != nil || !ok {
		t.Fatalf("CancelJob of the blocking failure = %v, %v; want true", ok, err)
	}
	if j := b.job(t, blocking); j.Status != testdb.PgtaskJobStatusCancelled {
		t.Fatalf("blocking job is %s, want cancelled", j.Status)
	}
}
