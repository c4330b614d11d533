package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// A cancel that commits while the attempt's retryable failure is being
// recorded, and whose job is claimed again before maintenance looks at the
// request, is not lost: the next attempt is cut short before its handler
// runs, and its failure ends the job cancelled.
func TestCancelRacingTheFailureSurvivesTheNextClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := enqueue(t, b.pool, "cancel.race", map[string]any{}, runtime.WithMaxAttempts(5))
	claimed, err := b.gen.ClaimJobs(ctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: 1})
	if err != nil || len(claimed) != 1 || claimed[0].ID != int64(id) {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	w, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Rollback(ctx) //nolint:errcheck // committed below
	status, err := gen.New(w).FailJob(ctx, gen.FailJobParams{ID: int64(id), Attempt: 1,
		Error: json.RawMessage(`{"attempt": 1, "error": "failed"}`), RetryInUs: pgtype.Int8{Int64: 0, Valid: true}})
	if err != nil || status != "queued" {
		t.Fatalf("fail_job: %q, %v", status, err)
	}
	if ok, err := runtime.CancelJob(ctx, b.pool, id); err != nil || !ok {
		t.Fatalf("CancelJob while the failure is being recorded: %v, %v", ok, err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Claimed again before maintenance runs.
	again, err := b.gen.ClaimJobs(ctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.gen.ApplyCancelRequests(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if len(again) == 0 {
		if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusCancelled {
			t.Fatalf("not claimed again, the job is %s; want cancelled", j.Status)
		}
		return
	}
	if again[0].ID != int64(id) || again[0].Attempts != 2 {
		t.Fatalf("second claim: %+v", again[0])
	}
	// The attempt the claim started must be asked to stop: its worker
	// finds the request, and its failure ends the job cancelled.
	asked, err := b.gen.CancelRequested(ctx, gen.CancelRequestedParams{Ids: []int64{int64(id)}, Attempts: []int32{2}})
	if err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || asked[0].Cause != "operator" || again[0].CancelCause != "operator" {
		t.Errorf("attempt 2 started after the cancel committed and nothing asks it to stop (claim: %+v)", again[0])
	}
	status, err = b.gen.FailJob(ctx, gen.FailJobParams{ID: int64(id), Attempt: 2,
		Error: json.RawMessage(`{"attempt": 2, "error": "cancelled"}`), RetryInUs: pgtype.Int8{Int64: 0, Valid: true}})
	if err != nil {
		t.Fatal(err)
	}
	if status != "cancelled" {
		t.Fatalf("attempt 2 failed and the job is %q; want cancelled", status)
	}
}

// Workers of both modes work jobs that fail and retry a few times before
// they succeed, while an operator cancels half of them at random moments.
// Every cancel is carried out: a cancelled job ends cancelled, unless the
// attempt that finished it started before the cancel returned (a handler
// that succeeds anyway succeeds); no attempt claimed after the cancel
// committed runs to its end.
func TestCancelsRacingRetriesAreNeverLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const perQueue = 60
	queues := map[string]runtime.Mode{"race_held": runtime.ModeHeld, "race_lease": runtime.ModeLease}
	handler := func(ctx context.Context, job *runtime.Job) error {
		select {
		case <-time.After(time.Duration(rand.IntN(3000)) * time.Microsecond):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if job.Attempt < 4 {
			return runtime.RetryAfter(time.Millisecond, errors.New("not yet"))
		}
		return nil
	}
	for queue, mode := range queues {
		qc := runtime.QueueConfig{Mode: mode, Concurrency: 2}
		if mode == runtime.ModeHeld {
			qc.BatchSize = 3
		}
		cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{queue: qc}}
		for range 2 {
			startWorker(t, b.url, cfg, runtime.Registration{Kind: queue + ".step", Queue: queue, Handler: handler})
		}
	}
	type cancelled struct {
		id runtime.JobID
		at time.Time // when CancelJob returned: its commit was before
	}
	var (
		mu   sync.Mutex
		done []cancelled
		wg   sync.WaitGroup
	)
	for queue := range queues {
		reqs := make([]runtime.EnqueueRequest, perQueue)
		for i := range reqs {
			reqs[i] = runtime.EnqueueRequest{Kind: queue + ".step", Payload: []byte(`{}`),
				EnqueueOptions: runtime.EnqueueOptions{Queue: queue, MaxAttempts: 20}}
		}
		ids, err := runtime.EnqueueMany(ctx, b.pool, reqs)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, id := range ids[:perQueue/2] {
				time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
				ok, err := runtime.CancelJob(ctx, b.pool, id)
				if err != nil {
					t.Errorf("CancelJob %d: %v", id, err)
					return
				}
				if ok {
					mu.Lock()
					done = append(done, cancelled{id, time.Now()})
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	byID := map[int64]testdb.PgtaskJob{}
	for queue := range queues {
		for _, j := range b.waitQueueDone(t, queue, 2*time.Minute) {
			byID[j.ID] = j
		}
	}
	if len(done) == 0 {
		t.Fatal("no cancel found a job unfinished")
	}
	ended := 0
	for _, c := range done {
		j := byID[int64(c.id)]
		switch {
		case j.Status == testdb.PgtaskJobStatusCancelled:
			ended++
		case j.StartedAt == nil || !j.StartedAt.Before(c.at):
			t.Errorf("job %d is %s after attempt %d, claimed at %v, after its cancel returned at %v",
				c.id, j.Status, j.Attempts, j.StartedAt, c.at)
		}
	}
	t.Logf("%d cancels carried out, %d jobs cancelled", len(done), ended)
	for id, j := range byID {
		if j.Status == testdb.PgtaskJobStatusFailed {
			t.Errorf("job %d failed for good: %s", id, j.Errors)
		}
	}
}

// A step that its workflow's cancel could not take (a claim held its row,
// then rolled back) is left queued for maintenance; a claim that takes it
// first does not run it: the attempt is cut short before its handler runs,
// and its failure ends the step cancelled.
func TestStepLeftByItsWorkflowsCancelIsNotRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("left-over")
	step := wf.Add(req("x", runtime.WithMaxAttempts(5)))
	id := enqueueIdle(t, b, wf)
	claim := beginTx(t, b)
	held, err := gen.New(claim).ClaimJobs(ctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: 1})
	if err != nil || len(held) != 1 || held[0].ID != int64(step.JobID()) {
		t.Fatalf("claim held open: %v, %v", held, err)
	}
	if ok, err := runtime.CancelWorkflowByID(ctx, b.pool, id); err != nil || !ok {
		t.Fatalf("CancelWorkflowByID: %v, %v", ok, err)
	}
	if err := claim.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if j := b.job(t, step.JobID()); j.Status != testdb.PgtaskJobStatusQueued {
		t.Fatalf("the step is %s; want it left queued for maintenance", j.Status)
	}
	again, err := b.gen.ClaimJobs(ctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(again) == 0 {
		if j := b.job(t, step.JobID()); j.Status != testdb.PgtaskJobStatusCancelled {
			t.Fatalf("not claimed, the step is %s; want cancelled", j.Status)
		}
		return
	}
	if again[0].CancelCause != "workflow" {
		t.Errorf("the claim started the step of a cancelled workflow with nothing asking it to stop, in the name of the operator's cancel of the workflow: %+v", again[0])
	}
	status, err := b.gen.FailJob(ctx, gen.FailJobParams{ID: again[0].ID, Attempt: again[0].Attempts,
		Error: json.RawMessage(`{"attempt": 1, "error": "cancelled"}`), RetryInUs: pgtype.Int8{Int64: 0, Valid: true}})
	if err != nil {
		t.Fatal(err)
	}
	if status != "cancelled" {
		t.Fatalf("the step's attempt failed and it is %q; want cancelled", status)
	}
}

// Maintenance holds a cancel request's row while it cancels the request's
// job (apply_cancel_requests), retrying the job's row until a claim that
// holds it commits. So a claim of the job must not wait for that request's
// row: it reads the request, and the attempt it starts is asked to stop.
func TestAClaimDoesNotWaitForACancelRequestsRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := enqueue(t, b.pool, "cancel.held_request", map[string]any{}, runtime.WithMaxAttempts(5))
	claimed, err := b.gen.ClaimJobs(ctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: 1})
	if err != nil || len(claimed) != 1 || claimed[0].ID != int64(id) {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	w, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Rollback(ctx) //nolint:errcheck // committed below
	if status, err := gen.New(w).FailJob(ctx, gen.FailJobParams{ID: int64(id), Attempt: 1,
		Error: json.RawMessage(`{"attempt": 1, "error": "failed"}`), RetryInUs: pgtype.Int8{Int64: 0, Valid: true}}); err != nil || status != "queued" {
		t.Fatalf("fail_job: %q, %v", status, err)
	}
	if ok, err := runtime.CancelJob(ctx, b.pool, id); err != nil || !ok {
		t.Fatalf("CancelJob while the failure is being recorded: %v, %v", ok, err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The job waits to run again, with a request pending; hold the
	// request's row as maintenance does while it cancels the job.
	m, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Rollback(ctx) //nolint:errcheck // only a lock
	if _, err := testdb.New(m).LockCancelRequest(ctx, int64(id)); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	again, err := b.gen.ClaimJobs(cctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: 1})
	if err != nil {
		t.Fatalf("the claim waited for the cancel request's row: %v", err)
	}
	if len(again) != 1 || again[0].ID != int64(id) || again[0].CancelCause != "operator" {
		t.Fatalf("claimed %+v; want job %d with its cancel requested", again, id)
	}
}
