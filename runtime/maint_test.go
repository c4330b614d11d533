package runtime_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// logged are the records of logs with message msg, and the value of their
// attribute key, formatted.
func (l *recordedLogs) logged(msg, key string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.records {
		if r.Message != msg {
			continue
		}
		v := ""
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				v = fmt.Sprint(a.Value.Any())
				return false
			}
			return true
		})
		out = append(out, v)
	}
	return out
}

const unmovableMsg = "pgtask: due jobs cannot be queued: their rows break a check constraint added after they were stored (NOT VALID), so no change to them can be written; delete them"

// The promotion service, driven step by step, queues the due scheduled
// jobs, leaves those not due, and names a due job it cannot move once
// until the set of such jobs changes.
func TestPromoteServiceStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	logs := &recordedLogs{}
	w := idleWorker(t, b.url, runtime.Config{Logger: slog.New(logs)})
	bad := insertOverBound(t, b, 1)
	due := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithDelay(time.Millisecond))
	later := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithDelay(time.Hour))
	time.Sleep(20 * time.Millisecond)

	if err := w.PromoteStep(ctx); err != nil {
		t.Fatal(err)
	}
	if s := b.job(t, due).Status; s != testdb.PgtaskJobStatusQueued {
		t.Errorf("the due job is %s, want queued", s)
	}
	if s := b.job(t, later).Status; s != testdb.PgtaskJobStatusScheduled {
		t.Errorf("the job due in an hour is %s, want scheduled", s)
	}
	if s := b.job(t, runtime.JobID(bad)).Status; s != testdb.PgtaskJobStatusScheduled {
		t.Errorf("the row that breaks the bound is %s, want left scheduled", s)
	}
	want := []string{fmt.Sprint([]int64{bad})}
	if got := logs.logged(unmovableMsg, "jobs"); !slices.Equal(got, want) {
		t.Fatalf("after the first step the unmovable jobs were logged as %q, want %q", got, want)
	}

	// Said once until the set changes.
	if err := w.PromoteStep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := logs.logged(unmovableMsg, "jobs"); !slices.Equal(got, want) {
		t.Fatalf("after a second step with nothing new the unmovable jobs were logged as %q, want %q", got, want)
	}
	bad2 := insertOverBound(t, b, 1)
	time.Sleep(20 * time.Millisecond)
	if err := w.PromoteStep(ctx); err != nil {
		t.Fatal(err)
	}
	want = append(want, fmt.Sprint([]int64{bad, bad2}))
	if got := logs.logged(unmovableMsg, "jobs"); !slices.Equal(got, want) {
		t.Fatalf("after another job became unmovable the logs say %q, want %q", got, want)
	}
}
