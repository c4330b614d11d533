package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// failedUniqueJobs enqueues a job of kind "bad" for each key, with that
// unique key, and fails each for good; a failed job frees its key.
func failedUniqueJobs(t *testing.T, b *bundle, keys ...string) []runtime.JobID {
	t.Helper()
	ctx := context.Background()
	w := idleWorker(t, b.url, runtime.Config{})
	if err := w.Register(runtime.Registration{Kind: "bad", Handler: func(context.Context, *runtime.Job) error {
		return runtime.NoRetry(errors.New("broken"))
	}}); err != nil {
		t.Fatal(err)
	}
	var ids []runtime.JobID
	for _, k := range keys {
		id, err := runtime.Enqueue(ctx, b.pool, uniqueReq("bad", k))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusFailed {
			t.Fatalf("job %d is %s, want failed", id, j.Status)
		}
	}
	return ids
}

// A bulk retry retries every job it can: a job whose unique key another
// job took meanwhile is left failed and reported, with the job that holds
// the key, and does not keep the others from being retried.
func TestRetryJobsRetriesAroundUniqueKeyConflicts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	failed := failedUniqueJobs(t, b, "k1", "k2", "k3", "k4", "k5")
	var holders []runtime.JobID
	for _, k := range []string{"k2", "k4"} {
		id, err := runtime.Enqueue(ctx, b.pool, uniqueReq("bad", k, runtime.WithDelay(time.Hour)))
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, id)
	}

	n, err := runtime.RetryJobs(ctx, b.pool, runtime.JobFilter{Statuses: []runtime.Status{runtime.StatusFailed}}, nil)
	if n != 3 {
		t.Fatalf("RetryJobs: %d, %v; want 3 retried", n, err)
	}
	var ce *runtime.RetryConflictsError
	want := []runtime.RetryConflict{{Job: failed[1], HeldBy: holders[0]}, {Job: failed[3], HeldBy: holders[1]}}
	if !errors.As(err, &ce) || ce.Retried != 3 || !slices.Equal(ce.Conflicts, want) {
		t.Fatalf("RetryJobs: %v; want a RetryConflictsError listing %+v", err, want)
	}
	msg := fmt.Sprintf("retried 3; 2 not retried, their unique keys held by other jobs now: job %d (held by job %d), job %d (held by job %d)",
		failed[1], holders[0], failed[3], holders[1])
	if !strings.Contains(err.Error(), msg) {
		t.Errorf("RetryJobs says %q, want %q", err, msg)
	}
	for i, id := range failed {
		want := testdb.PgtaskJobStatusQueued
		if i == 1 || i == 3 {
			want = testdb.PgtaskJobStatusFailed
		}
		if j := b.job(t, id); j.Status != want {
			t.Errorf("job %d (key k%d) is %s, want %s", id, i+1, j.Status, want)
		}
	}
	// Once the holders finish, the conflicts retry.
	for _, h := range holders {
		if ok, err := runtime.CancelJob(ctx, b.pool, h); err != nil || !ok {
			t.Fatalf("cancel job %d: %v, %v", h, ok, err)
		}
	}
	if n, err := runtime.RetryJobs(ctx, b.pool, runtime.JobFilter{Statuses: []runtime.Status{runtime.StatusFailed}}, nil); n != 2 || err != nil {
		t.Fatalf("RetryJobs once the keys are free: %d, %v; want the 2 left retried", n, err)
	}
}

// Retrying one job whose unique key another job holds now says so, and
// which job holds it; the job stays failed.
func TestRetryJobRefusesATakenUniqueKeyClearly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	failed := failedUniqueJobs(t, b, "k")[0]
	holder, err := runtime.Enqueue(ctx, b.pool, uniqueReq("bad", "k", runtime.WithDelay(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	ok, err := runtime.RetryJob(ctx, b.pool, failed)
	if ok || err == nil || strings.Contains(err.Error(), "duplicate key") {
		t.Fatalf("RetryJob: %v, %v; want a clear refusal naming job %d", ok, err, holder)
	}
	var c *runtime.RetryConflict
	msg := fmt.Sprintf("retry job %d: job %d holds its unique key now", failed, holder)
	if !errors.As(err, &c) || *c != (runtime.RetryConflict{Job: failed, HeldBy: holder}) || err.Error() != msg {
		t.Fatalf("RetryJob: %v; want a RetryConflict saying %q", err, msg)
	}
	if j := b.job(t, failed); j.Status != testdb.PgtaskJobStatusFailed {
		t.Fatalf("the refused retry left the job %s", j.Status)
	}
}

// An operator's retry and an enqueue of the same unique key, at once: one
// of them gets the key and the other is told which job holds it, never a
// duplicate key error.
func TestRetryJobRacesAnEnqueueOfItsKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = fmt.Sprintf("race%d", i)
	}
	failed := failedUniqueJobs(t, b, keys...)
	for i, id := range failed {
		var (
			wg               sync.WaitGroup
			retried          bool
			retryErr, enqErr error
			enqueued         runtime.EnqueueResult
		)
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			retried, retryErr = runtime.RetryJob(ctx, b.pool, id)
		}()
		go func() {
			defer wg.Done()
			<-start
			var rs []runtime.EnqueueResult
			rs, enqErr = runtime.EnqueueResults(ctx, b.pool, []runtime.EnqueueRequest{uniqueReq("bad", keys[i], runtime.WithDelay(time.Hour))})
			if enqErr == nil {
				enqueued = rs[0]
			}
		}()
		close(start)
		wg.Wait()
		if enqErr != nil {
			t.Fatalf("round %d: enqueue: %v", i, enqErr)
		}
		var c *runtime.RetryConflict
		switch {
		case retried && retryErr == nil:
			if !enqueued.Existed || enqueued.ID != id {
				t.Fatalf("round %d: the retry won, but the enqueue got %+v, want job %d", i, enqueued, id)
			}
		case errors.As(retryErr, &c):
			if enqueued.Existed || c.HeldBy != enqueued.ID {
				t.Fatalf("round %d: the retry lost to %+v, but says %v", i, enqueued, retryErr)
			}
		default:
			t.Fatalf("round %d: RetryJob: %v, %v", i, retried, retryErr)
		}
	}
}

// An operator's retry is marked in the job's error history, between the
// failures before it and those after, which count their attempts from 1
// again.
func TestRetryIsMarkedInTheErrorHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := failedUniqueJobs(t, b, "marked")[0]
	before := time.Now()
	if ok, err := runtime.RetryJob(ctx, b.pool, id); err != nil || !ok {
		t.Fatalf("RetryJob: %v, %v", ok, err)
	}
	after := time.Now()
	w := idleWorker(t, b.url, runtime.Config{})
	if err := w.Register(runtime.Registration{Kind: "bad", Handler: func(context.Context, *runtime.Job) error {
		return runtime.NoRetry(errors.New("broken again"))
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	var raw []map[string]any
	if err := json.Unmarshal(b.job(t, id).Errors, &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw) != 3 || raw[1]["operator_retry"] != true {
		t.Fatalf("error history %v; want the two failures with the retry marked between them", raw)
	}
	info, err := runtime.GetJob(ctx, b.pool, id)
	if err != nil {
		t.Fatal(err)
	}
	first, mark, last := info.Errors[0], info.Errors[1], info.Errors[2]
	if first.Attempt != 1 || first.Error != "broken" || first.OperatorRetry ||
		!mark.OperatorRetry || mark.Attempt != 1 || mark.Error != "retried by an operator after 1 attempt(s); attempts count from 1 again" ||
		mark.At.Before(before.Add(-time.Second)) || mark.At.After(after.Add(time.Second)) ||
		last.Attempt != 1 || last.Error != "broken again" || last.OperatorRetry {
		t.Fatalf("error history %+v", info.Errors)
	}
}
