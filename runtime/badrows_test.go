package runtime_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// longQueue is over the bound migration 0003 put on queue names.
var longQueue = strings.Repeat("q", runtime.MaxQueueBytes+1)

// insertOverBound stores, as code from before the bound could have, a job
// of longQueue delayed by delayUs, and puts the bound back NOT VALID, as
// the migration left it: the row breaks it, and no change to the row can
// be written.
func insertOverBound(t *testing.T, b *bundle, delayUs int64) int64 {
	t.Helper()
	ctx := context.Background()
	if err := b.q.DropQueueBound(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := b.gen.InsertJobsV3(ctx, gen.InsertJobsV3Params{
		Payloads: []json.RawMessage{json.RawMessage(`{}`)}, Settings: []int32{1}, Groups: []int32{0},
		Kinds: []string{"k"}, Queues: []string{longQueue}, Priorities: []int16{0}, MaxAttempts: []int32{3},
		FailBlocksGroup: []bool{false}, RunAt: []string{""}, DelayUs: []int64{delayUs},
		GroupQueues: []string{}, GroupKeys: []string{},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.q.RestoreQueueBoundNotValid(ctx); err != nil {
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
