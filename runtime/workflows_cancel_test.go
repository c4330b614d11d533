package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// enqueueIdle enqueues wf with no worker running and returns its id.
func enqueueIdle(t *testing.T, b *bundle, wf *runtime.Workflow) runtime.WorkflowID {
	t.Helper()
	id, err := wf.Enqueue(context.Background(), b.pool)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// beginTx begins a transaction on b's pool, rolled back when the test ends
// if it is still open.
func beginTx(t *testing.T, b *bundle) pgx.Tx {
	t.Helper()
	tx, err := b.pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// A finisher whose failure cancels its workflow never waits for a step's
// row: an operator holds a pending step's row (cancelling it) and then
// needs the workflow's row (cancelling another step whose failure cancels
// the workflow too). Both go on at once; the step the finisher could not
// take is left to maintenance, which cancels it once it is free.
func TestWorkflowCancelNeverWaitsForAStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("no-wait")
	p1 := wf.Add(req("x"))
	p2 := wf.Add(req("x"))
	p3 := wf.Add(req("x"))
	c := wf.Add(req("x"), runtime.After(p2))
	wf.Add(req("x"), runtime.AfterOrCancelWorkflow(p1))
	wf.Add(req("x"), runtime.AfterOrCancelWorkflow(p3))
	id := enqueueIdle(t, b, wf)

	op := beginTx(t, b)
	if _, err := runtime.CancelJob(ctx, op, p2.JobID()); err != nil {
		t.Fatal(err)
	}
	finished := make(chan error, 1)
	go func() {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := b.q.FinishJobAs(fctx, testdb.FinishJobAsParams{ID: int64(p1.JobID()), Status: testdb.PgtaskJobStatusFailed})
		finished <- err
	}()
	select {
	case err := <-finished:
		if err != nil {
			t.Fatalf("the failing finisher: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the failing finisher still waits for the step the operator holds after 5s")
	}
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := runtime.CancelJob(octx, op, p3.JobID()); err != nil {
		t.Fatalf("the operator's second cancel: %v", err)
	}
	if err := op.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Maintenance finishes the cancel.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := b.gen.CancelPendingWorkflows(ctx, 10); err != nil {
			t.Fatal(err)
		}
		s, err := runtime.GetWorkflow(ctx, b.pool, id)
		if err != nil {
			t.Fatal(err)
		}
		if s.Waiting+s.Queued+s.Started == 0 {
			if s.Status != runtime.WorkflowCancelled {
				t.Fatalf("workflow %+v", s)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("steps left after 10s: %+v", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if j, err := b.q.GetJob(ctx, int64(c.JobID())); err != nil || j.Status != testdb.PgtaskJobStatusCancelled {
		t.Fatalf("step after the cancelled one: %v %v", j.Status, err)
	}
}

// A workflow cancelled while a finisher releases one of its steps ends
// with that step cancelled, not queued: a release that commits after the
// cancel sees it, and a cancel that commits after the release finds the
// step released and cancels it.
func TestWorkflowCancelRacesARelease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for round := range 20 {
		wf := runtime.NewWorkflow("cancel-race")
		p1 := wf.Add(req("x"))
		p2 := wf.Add(req("x"))
		c := wf.Add(req("x"), runtime.After(p2))
		wf.Add(req("x"), runtime.AfterOrCancelWorkflow(p1))
		enqueueIdle(t, b, wf)

		// The releaser holds its transaction open a while, as a held
		// batch does up to its commit.
		rel := beginTx(t, b)
		if _, err := testdb.New(rel).FinishJobAs(ctx, testdb.FinishJobAsParams{ID: int64(p2.JobID()), Status: testdb.PgtaskJobStatusSucceeded}); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := b.q.FinishJobAs(fctx, testdb.FinishJobAsParams{ID: int64(p1.JobID()), Status: testdb.PgtaskJobStatusFailed})
			done <- err
		}()
		time.Sleep(time.Duration(round%4) * 25 * time.Millisecond)
		if err := rel.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// What maintenance has left to do, done.
		for range 50 {
			n, err := b.gen.CancelPendingWorkflows(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		j, err := b.q.GetJob(ctx, int64(c.JobID()))
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != testdb.PgtaskJobStatusCancelled {
			t.Fatalf("round %d: the released step of the cancelled workflow is %s", round, j.Status)
		}
	}
}

// A workflow cancelled while one of its steps cannot be cancelled yet (an
// operator holds its row) says it is cancelling until maintenance has
// cancelled that step, then cancelled.
func TestWorkflowCancellingUntilItsStepsEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("cancelling")
	s := wf.Add(req("x"))
	id := enqueueIdle(t, b, wf)
	op := beginTx(t, b)
	if err := testdb.New(op).LockJobRow(ctx, int64(s.JobID())); err != nil {
		t.Fatal(err)
	}
	if ok, err := runtime.CancelWorkflowByID(ctx, b.pool, id); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if st, err := runtime.GetWorkflow(ctx, b.pool, id); err != nil || st.Status != runtime.WorkflowCancelling || st.Queued != 1 {
		t.Fatalf("with a step left to cancel: %+v, %v", st, err)
	}
	if err := op.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := b.gen.CancelPendingWorkflows(ctx, 10); err != nil || n != 0 {
		t.Fatalf("maintenance: %d left, %v", n, err)
	}
	if st, err := runtime.GetWorkflow(ctx, b.pool, id); err != nil || st.Status != runtime.WorkflowCancelled || st.Cancelled != 1 {
		t.Fatalf("once maintenance cancelled the step: %+v, %v", st, err)
	}
}

// A step whose parent's job retention deleted before the step read its
// result is told the result is gone.
func TestWorkflowInputOfAGoneParent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("gone")
	parent := runtime.StepWithResult[int]{Step: wf.Add(req("x"))}
	payload, err := json.Marshal(map[string]any{"in": parent.Output()})
	if err != nil {
		t.Fatal(err)
	}
	child := wf.AddStep(runtime.EnqueueRequest{Kind: "reader", Payload: payload}, nil, parent.Output().Dep("In"))
	enqueueIdle(t, b, wf)
	if _, err := b.q.FinishJobAs(ctx, testdb.FinishJobAsParams{ID: int64(parent.JobID()), Status: testdb.PgtaskJobStatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.q.DeleteJob(ctx, int64(parent.JobID())); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "reader", Handler: func(ctx context.Context, job *runtime.Job) error {
		var p struct {
			In runtime.Input[int] `json:"in"`
		}
		if err := json.Unmarshal(job.Payload, &p); err != nil {
			return err
		}
		_, err := p.In.Get(ctx, job)
		select {
		case got <- err:
		default:
		}
		return nil
	}})
	select {
	case err := <-got:
		if !errors.Is(err, runtime.ErrParentGone) {
			t.Fatalf("Get: %v, want ErrParentGone", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("step %d did not run in 30s", child.JobID())
	}
}

// A lease-mode step reads its parent's result without opening its job's
// transaction: a lease handler holds no connection while it runs.
func TestWorkflowLeaseInputHoldsNoConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("lease-input")
	parent := runtime.StepWithResult[int]{Step: wf.Add(req("x"))}
	payload, err := json.Marshal(map[string]any{"in": parent.Output()})
	if err != nil {
		t.Fatal(err)
	}
	wf.AddStep(runtime.EnqueueRequest{Kind: "reader", Payload: payload}, nil, parent.Output().Dep("In"))
	enqueueIdle(t, b, wf)
	if _, err := b.q.FinishJobAs(ctx, testdb.FinishJobAsParams{ID: int64(parent.JobID()), Status: testdb.PgtaskJobStatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	type seen struct {
		err  error
		open int32
	}
	got := make(chan seen, 1)
	cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: runtime.ModeLease}}}
	startWorker(t, b.url, cfg, runtime.Registration{Kind: "reader", Handler: func(ctx context.Context, job *runtime.Job) error {
		var p struct {
			In runtime.Input[int] `json:"in"`
		}
		if err := json.Unmarshal(job.Payload, &p); err != nil {
			return err
		}
		_, err := p.In.Get(ctx, job)
		open, cerr := b.q.CountIdleInTransaction(ctx)
		if err == nil {
			err = cerr
		}
		select {
		case got <- seen{err, open}:
		default:
		}
		return nil
	}})
	select {
	case s := <-got:
		if s.err != nil {
			t.Fatal(s.err)
		}
		if s.open != 0 {
			t.Fatalf("%d sessions in an open transaction while the lease handler ran after Get", s.open)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the step did not run in 30s")
	}
}

// A workflow's cancel misses no step claimed while it runs: here the
// cancel waits (behind an operator's uncommitted cancel of the running
// step) while a lease claim starts the other, queued, step and commits.
// That step is asked to stop, or left to maintenance; it is never left
// running with the workflow's cancel done.
func TestWorkflowCancelSeesAStepClaimedMeanwhile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("claimed-meanwhile")
	running := wf.Add(req("x"))
	queued := wf.Add(req("x"))
	id := enqueueIdle(t, b, wf)
	if n, err := b.q.StartJobAsLeased(ctx, int64(running.JobID())); err != nil || n != 1 {
		t.Fatalf("start the running step: %d, %v", n, err)
	}

	op := beginTx(t, b)
	if ok, err := runtime.CancelJob(ctx, op, running.JobID()); err != nil || !ok {
		t.Fatalf("the operator's cancel: %v, %v", ok, err)
	}
	canceller, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer canceller.Release()
	cancelled := make(chan error, 1)
	go func() {
		_, err := runtime.CancelWorkflowByID(ctx, canceller, id)
		cancelled <- err
	}()
	waitBlockedBy(t, b, op, "the operator")

	// The claim either commits now (before the cancel got to the step) or
	// waits for the cancel, which holds the step then.
	claimed := make(chan int64, 1)
	go func() {
		n, err := b.q.StartJobAsLeased(ctx, int64(queued.JobID()))
		if err != nil {
			t.Error(err)
		}
		claimed <- n
	}()
	cpid := int32(canceller.Conn().PgConn().PID())
	var n int64 = -1
	for deadline := time.Now().Add(30 * time.Second); n < 0; time.Sleep(10 * time.Millisecond) {
		select {
		case n = <-claimed:
			continue
		default:
		}
		if k, err := b.q.CountBlockedBy(ctx, cpid); err != nil {
			t.Fatal(err)
		} else if k > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the claim neither committed nor waited for the cancel")
		}
	}
	if err := op.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-cancelled; err != nil {
		t.Fatal(err)
	}
	if n < 0 {
		n = <-claimed
	}

	j, err := b.q.GetJob(ctx, int64(queued.JobID()))
	if err != nil {
		t.Fatal(err)
	}
	asked, err := b.q.CancelRequested(ctx, int64(queued.JobID()))
	if err != nil {
		t.Fatal(err)
	}
	pending, err := b.q.WorkflowCancelPending(ctx, int64(id))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case n == 1 && j.Status == testdb.PgtaskJobStatusStarted && !asked && !pending:
		t.Fatalf("step %d was claimed during the workflow's cancel and left running: no cancel request, nothing left to maintenance", queued.JobID())
	case n == 0 && j.Status != testdb.PgtaskJobStatusCancelled:
		t.Fatalf("step %d not claimed but %s after the workflow's cancel", queued.JobID(), j.Status)
	}
	if ok, err := b.q.CancelRequested(ctx, int64(running.JobID())); err != nil || !ok {
		t.Fatalf("running step: cancel requested %v, %v", ok, err)
	}
	t.Logf("claim took the step: %v; step %s, asked to stop %v, left to maintenance %v", n == 1, j.Status, asked, pending)
}
