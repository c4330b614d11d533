package runtime_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// A step left queued by its workflow's cancel (its group's row was held,
// so the cancel could not take it, nor can maintenance yet) and then
// claimed by a worker is cut short before its handler runs, and its error
// entry says what cancelled the workflow: the failure of its step 1 under
// AfterOrCancelWorkflow, or an operator's CancelWorkflowByID; never an
// operator's cancel of the job when no operator cancelled anything.
func TestStepCutShortSaysWhatCancelledItsWorkflow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// cancel cancels the workflow, whose step 1 is failing.
		cancel func(t *testing.T, b *bundle, id runtime.WorkflowID, failing runtime.JobID)
		want   string
	}{
		{"step failed", func(t *testing.T, b *bundle, _ runtime.WorkflowID, failing runtime.JobID) {
			if _, err := b.q.FinishJobAs(context.Background(), testdb.FinishJobAsParams{ID: int64(failing), Status: testdb.PgtaskJobStatusFailed}); err != nil {
				t.Fatal(err)
			}
		}, "pgtask: job cancelled with its workflow (step 1 failed) before the attempt started"},
		{"operator", func(t *testing.T, b *bundle, id runtime.WorkflowID, _ runtime.JobID) {
			if ok, err := runtime.CancelWorkflowByID(context.Background(), b.pool, id); err != nil || !ok {
				t.Fatalf("CancelWorkflowByID: %v, %v", ok, err)
			}
		}, "pgtask: job cancelled with its workflow by an operator before the attempt started"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			ran := make(chan runtime.JobID, 1)
			wf := runtime.NewWorkflow("cut-short")
			step := wf.Add(req("cause.step", runtime.WithGroup("g"), runtime.WithMaxAttempts(5)))
			// In a queue no worker serves: it fails only as the test says.
			failing := wf.Add(req("cause.failing", runtime.WithQueue("idle")))
			wf.Add(req("cause.step"), runtime.AfterOrCancelWorkflow(failing))
			id := enqueueIdle(t, b, wf)

			group := beginTx(t, b)
			if err := testdb.New(group).LockGroupRow(ctx, testdb.LockGroupRowParams{Queue: runtime.DefaultQueue, GroupKey: "g"}); err != nil {
				t.Fatal(err)
			}
			tc.cancel(t, b, id, failing.JobID())
			if j := b.job(t, step.JobID()); j.Status != testdb.PgtaskJobStatusQueued {
				t.Fatalf("the step is %s; want it left queued", j.Status)
			}
			cfg := runtime.Config{PollInterval: 20 * time.Millisecond, MaintenanceInterval: time.Hour}
			startWorker(t, b.url, cfg, runtime.Registration{Kind: "cause.step", Handler: func(_ context.Context, job *runtime.Job) error {
				ran <- job.ID
				return nil
			}})
			j := b.waitStatus(t, step.JobID(), 10*time.Second, testdb.PgtaskJobStatusCancelled, testdb.PgtaskJobStatusSucceeded,
				testdb.PgtaskJobStatusFailed)
			select {
			case ran := <-ran:
				t.Fatalf("the handler ran job %d", ran)
			default:
			}
			errs := errorsOf(t, j)
			if j.Status != testdb.PgtaskJobStatusCancelled || len(errs) != 1 || errs[0].Error != tc.want {
				t.Fatalf("the step is %s with errors %+v; want cancelled with %q", j.Status, errs, tc.want)
			}
			if err := group.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A running step whose workflow a step's failure cancels is asked to stop
// in the failure's name: its handler's context's cause matches
// ErrJobCancelled and names the failed step, as does its error entry.
func TestRunningStepStoppedSaysWhichStepFailed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c := newCancellable()
	wf := runtime.NewWorkflow("stopped")
	failing := wf.Add(req("cause.failing", runtime.WithQueue("idle")))
	running := wf.Add(req("cause.wait", runtime.WithMaxAttempts(5)))
	wf.Add(req("cause.wait"), runtime.AfterOrCancelWorkflow(failing))
	enqueueIdle(t, b, wf)
	cfg := runtime.Config{PollInterval: 20 * time.Millisecond, MaintenanceInterval: time.Hour}
	startWorker(t, b.url, cfg, c.registration("cause.wait", false))
	c.waitStarted(t, running.JobID())
	if _, err := b.q.FinishJobAs(ctx, testdb.FinishJobAsParams{ID: int64(failing.JobID()), Status: testdb.PgtaskJobStatusFailed}); err != nil {
		t.Fatal(err)
	}
	const want = "pgtask: job cancelled with its workflow (step 0 failed)"
	select {
	case cause := <-c.causes:
		if !errors.Is(cause, runtime.ErrJobCancelled) || cause.Error() != want {
			t.Fatalf("the handler's context's cause: %v; want %q, ErrJobCancelled", cause, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context was not cancelled")
	}
	j := b.waitStatus(t, running.JobID(), 10*time.Second, testdb.PgtaskJobStatusCancelled, testdb.PgtaskJobStatusQueued,
		testdb.PgtaskJobStatusScheduled, testdb.PgtaskJobStatusFailed)
	errs := errorsOf(t, j)
	if j.Status != testdb.PgtaskJobStatusCancelled || len(errs) != 1 || !strings.HasPrefix(errs[0].Error, want+" during the attempt") ||
		strings.Contains(errs[0].Error, "by an operator") {
		t.Fatalf("the step is %s with errors %+v; want cancelled, %q during the attempt", j.Status, errs, want)
	}
}
