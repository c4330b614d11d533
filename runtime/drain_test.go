package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// Drain runs what can run now in the calling goroutine, group order kept,
// and returns: a failure's retry waits for its backoff, a delayed job for
// its time, and a queue the worker does not serve is left alone.
func TestDrainRunsWhatCanRunNow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := idleWorker(t, b.url, runtime.Config{})
	var mu sync.Mutex
	var ran []runtime.JobID
	record := func(job *runtime.Job) {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, job.ID)
	}
	for _, r := range []runtime.Registration{
		{Kind: "ok", Handler: func(_ context.Context, job *runtime.Job) error { record(job); return nil }},
		{Kind: "fail", Backoff: runtime.Backoff{Min: time.Hour}, Handler: func(_ context.Context, job *runtime.Job) error {
			record(job)
			return errors.New("not yet")
		}},
	} {
		if err := w.Register(r); err != nil {
			t.Fatal(err)
		}
	}
	first := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithGroup("g"))
	second := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithGroup("g"))
	failing := enqueue(t, b.pool, "fail", map[string]int{})
	later := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithDelay(time.Hour))
	elsewhere := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithQueue("unserved"))
	third := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithGroup("g"))

	n, err := w.Drain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inGroup := slices.DeleteFunc(slices.Clone(ran), func(id runtime.JobID) bool { return id == failing })
	if n != 4 || len(ran) != 4 || !slices.Contains(ran, failing) || !slices.Equal(inGroup, []runtime.JobID{first, second, third}) {
		t.Fatalf("Drain ran %d: %v, want %d, %d and %d in that order, and %d", n, ran, first, second, third, failing)
	}
	for id, status := range map[runtime.JobID]testdb.PgtaskJobStatus{
		first: testdb.PgtaskJobStatusSucceeded, third: testdb.PgtaskJobStatusSucceeded,
		failing: testdb.PgtaskJobStatusScheduled, later: testdb.PgtaskJobStatusScheduled, elsewhere: testdb.PgtaskJobStatusQueued,
	} {
		if j := b.job(t, id); j.Status != status {
			t.Errorf("job %d is %s, want %s", id, j.Status, status)
		}
	}
	if n, err := w.Drain(ctx); n != 0 || err != nil {
		t.Errorf("a second Drain ran %d (%v), want none", n, err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, 10*time.Second, "the worker to run and lead", w.IsLeader)
	if _, err := w.Drain(ctx); err == nil {
		t.Fatal("Drain on a running worker succeeded")
	}
}

// WorkOne runs one attempt at a time and returns the job as it left it:
// nothing else runs meanwhile, a failure comes back waiting for its retry,
// and with nothing runnable it returns nil.
func TestWorkOneRunsOneAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := idleWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {BatchSize: 10}}})
	var calls int
	for _, r := range []runtime.Registration{
		{Kind: "ok", Handler: func(_ context.Context, job *runtime.Job) error { calls++; return job.SetResult(job.ID) }},
		{Kind: "fail", Backoff: runtime.Backoff{Min: time.Hour}, Handler: func(context.Context, *runtime.Job) error {
			calls++
			return errors.New("not yet")
		}},
	} {
		if err := w.Register(r); err != nil {
			t.Fatal(err)
		}
	}
	if info, err := w.WorkOne(ctx); info != nil || err != nil {
		t.Fatalf("WorkOne with no jobs: %v, %v; want nil, nil", info, err)
	}
	first := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithGroup("g"))
	second := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithGroup("g"))
	failing := enqueue(t, b.pool, "fail", map[string]int{}, runtime.WithPriority(1))

	info, err := w.WorkOne(ctx)
	if err != nil || info == nil || info.ID != first || info.Status != runtime.StatusSucceeded || string(info.Result) != fmt.Sprint(first) {
		t.Fatalf("first WorkOne: %+v, %v; want job %d succeeded with its id as result", info, err, first)
	}
	if calls != 1 || b.job(t, second).Status != testdb.PgtaskJobStatusQueued {
		t.Fatalf("WorkOne ran %d handlers, second job %s: want one, and the second still queued", calls, b.job(t, second).Status)
	}
	if info, err = w.WorkOne(ctx); err != nil || info == nil || info.ID != second {
		t.Fatalf("second WorkOne: %+v, %v; want job %d", info, err, second)
	}
	info, err = w.WorkOne(ctx)
	if err != nil || info == nil || info.ID != failing || info.Status != runtime.StatusScheduled ||
		len(info.Errors) != 1 || info.Errors[0].Error != "not yet" {
		t.Fatalf("third WorkOne: %+v, %v; want job %d scheduled for its retry with its error", info, err, failing)
	}
	if info, err := w.WorkOne(ctx); info != nil || err != nil || calls != 3 {
		t.Fatalf("WorkOne with only a retry waiting: %v, %v, %d calls; want nil", info, err, calls)
	}
}
