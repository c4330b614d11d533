package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// A job whose stored error history is long (code that kept it unbounded
// could leave one) fails once more promptly, and its history ends bounded:
// trimming it costs one pass, not one pass per entry.
func TestLongErrorHistoryIsTrimmedPromptly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := idleWorker(t, b.url, runtime.Config{})
	if err := w.Register(runtime.Registration{Kind: "flaky", Backoff: runtime.Backoff{Min: time.Hour},
		Handler: func(context.Context, *runtime.Job) error { return errors.New("failed again") }}); err != nil {
		t.Fatal(err)
	}
	id := enqueue(t, b.pool, "flaky", map[string]int{}, runtime.WithMaxAttempts(100))
	if err := b.q.FillErrorHistory(context.Background(), testdb.FillErrorHistoryParams{ID: int64(id), Entries: 20000}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	info, err := w.WorkOne(ctx)
	took := time.Since(start)
	if err != nil || info == nil || info.ID != id {
		t.Fatalf("WorkOne after %s: %+v, %v; want job %d's failed attempt recorded", took, info, err, id)
	}
	if took > 3*time.Second {
		t.Errorf("recording the failure took %s", took)
	}
	if info.Status != runtime.StatusScheduled || len(info.Errors) != 25 {
		t.Fatalf("job %s with %d errors, want scheduled with the newest 25", info.Status, len(info.Errors))
	}
	first, last := info.Errors[0], info.Errors[24]
	if first.Attempt != 19977 || first.Error != "an old failure" || last.Attempt != 1 || last.Error != "failed again" {
		t.Fatalf("history from %+v to %+v; want old attempt 19977 first and the new failure last", first, last)
	}
}
