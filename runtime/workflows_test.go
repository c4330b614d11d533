package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// stepRecorder checks, as each workflow step starts, that every parent it
// waits for under the default policy has succeeded (read from another
// session: committed), and counts the starts of each step.
type stepRecorder struct {
	mu      sync.Mutex
	starts  map[runtime.JobID]int
	bad     []string
	parents map[runtime.JobID][]runtime.JobID
	check   func(ctx context.Context, parents []runtime.JobID) (map[runtime.JobID]string, error)
}

func newStepRecorder(b *bundle) *stepRecorder {
	return &stepRecorder{starts: map[runtime.JobID]int{}, parents: map[runtime.JobID][]runtime.JobID{},
		check: func(ctx context.Context, parents []runtime.JobID) (map[runtime.JobID]string, error) {
			out := map[runtime.JobID]string{}
			for _, p := range parents {
				j, err := runtime.GetJob(ctx, b.pool, p)
				if err != nil {
					return nil, err
				}
				out[p] = string(j.Status)
			}
			return out, nil
		}}
}

// handler records a start of job and checks its parents.
func (r *stepRecorder) handler(kind string) runtime.Registration {
	return runtime.Registration{Kind: kind, Handler: func(ctx context.Context, job *runtime.Job) error {
		r.mu.Lock()
		r.starts[job.ID]++
		ps := r.parents[job.ID]
		r.mu.Unlock()
		st, err := r.check(ctx, ps)
		if err != nil {
			return err
		}
		for p, s := range st {
			if s != string(runtime.StatusSucceeded) {
				r.mu.Lock()
				r.bad = append(r.bad, fmt.Sprintf("job %d started while parent %d was %s", job.ID, p, s))
				r.mu.Unlock()
			}
		}
		return nil
	}}
}

func (r *stepRecorder) expect(child runtime.JobID, parents ...runtime.JobID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.parents[child] = append(r.parents[child], parents...)
}

func (r *stepRecorder) verify(t *testing.T, ids []runtime.JobID) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bad) > 0 {
		t.Fatalf("%d violations, first: %s", len(r.bad), r.bad[0])
	}
	for _, id := range ids {
		if r.starts[id] != 1 {
			t.Fatalf("job %d started %d times", id, r.starts[id])
		}
	}
}

// waitWorkflow waits until workflow id has no step left to run.
func waitWorkflow(t *testing.T, b *bundle, id runtime.WorkflowID, timeout time.Duration) *runtime.WorkflowState {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s, err := runtime.GetWorkflow(context.Background(), b.pool, id)
		if err != nil {
			t.Fatal(err)
		}
		if s.Status != runtime.WorkflowRunning && s.Waiting+s.Queued+s.Started == 0 {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("workflow %d still running after %s: %+v", id, timeout, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A diamond, a chain and a fan-in in one workflow, worked by three workers
// at once in each mode: every step starts once, and only after all its
// parents have succeeded.
func TestWorkflowStepsStartAfterTheirParents(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			wf := runtime.NewWorkflow("shapes")
			type edge struct{ child, parent runtime.Step }
			var edges []edge
			add := func(deps ...runtime.Step) runtime.Step {
				var opts []runtime.StepOption
				for _, d := range deps {
					opts = append(opts, runtime.After(d))
				}
				s := wf.Add(req("step"), opts...)
				for _, d := range deps {
					edges = append(edges, edge{s, d})
				}
				return s
			}
			top := add()
			l, r := add(top), add(top)
			bottom := add(l, r)
			prev := bottom
			for range 30 {
				prev = add(prev)
			}
			var fan []runtime.Step
			for range 300 {
				fan = append(fan, add(prev))
			}
			last := add(fan...)
			id, err := wf.Enqueue(ctx, b.pool)
			if err != nil {
				t.Fatal(err)
			}
			rec := newStepRecorder(b)
			for _, e := range edges {
				rec.expect(e.child.JobID(), e.parent.JobID())
			}
			cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: mode, Concurrency: 4}},
				MaintenanceInterval: 50 * time.Millisecond}
			for range 3 {
				startWorker(t, b.url, cfg, rec.handler("step"))
			}
			s := waitWorkflow(t, b, id, 60*time.Second)
			if s.Status != runtime.WorkflowSucceeded || s.Succeeded != len(wf.JobIDs()) {
				t.Fatalf("workflow %+v", s)
			}
			rec.verify(t, wf.JobIDs())
			if j := b.job(t, last.JobID()); j.Status != testdb.PgtaskJobStatusSucceeded {
				t.Fatalf("fan-in step %s", j.Status)
			}
			var notes int
			if err := b.pool.QueryRow(ctx, "SELECT count(*) FROM pgtask.workflow_notes").Scan(&notes); err != nil {
				t.Fatal(err)
			}
			if notes != 0 {
				t.Fatalf("%d notes left", notes)
			}
		})
	}
}

// A failure at the head of a 1,000-step chain cancels all 999 steps after
// it in the transaction that records it, without nesting a trigger per
// step; a retry of the head makes them wait again, and they all run.
func TestWorkflowChainFailureCancelsEveryDependent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("chain")
	prev := wf.Add(req("step"))
	for range 999 {
		prev = wf.Add(req("step"), runtime.After(prev))
	}
	id, err := wf.Enqueue(ctx, b.pool)
	if err != nil {
		t.Fatal(err)
	}
	ids := wf.JobIDs()
	// The head fails for good: here, cancelled by an operator.
	if ok, err := runtime.CancelJob(ctx, b.pool, ids[0]); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	s, err := runtime.GetWorkflow(ctx, b.pool, id)
	if err != nil {
		t.Fatal(err)
	}
	if s.Cancelled != 1000 || s.Status != runtime.WorkflowCancelled {
		t.Fatalf("after the head's cancel: %+v", s)
	}
	// The operator retries the head: the chain waits for it again.
	if ok, err := runtime.RetryJob(ctx, b.pool, ids[0]); err != nil || !ok {
		t.Fatalf("retry: %v %v", ok, err)
	}
	s, err = runtime.GetWorkflow(ctx, b.pool, id)
	if err != nil {
		t.Fatal(err)
	}
	if s.Queued != 1 || s.Waiting != 999 || s.Status != runtime.WorkflowRunning {
		t.Fatalf("after the head's retry: %+v", s)
	}
	startWorker(t, b.url, runtime.Config{}, noop("step"))
	s = waitWorkflow(t, b, id, 60*time.Second)
	if s.Status != runtime.WorkflowSucceeded {
		t.Fatalf("workflow %+v", s)
	}
}

// The three failure policies: a step that fails for good cancels its
// dependents under CancelDependent (and theirs in turn), lets a clean-up
// step run under RunAnyway, whose read of its result is ErrParentFailed,
// and cancels the whole workflow under CancelWorkflow. A retry of the
// failed step makes the dependents it cancelled wait again, and they run.
func TestWorkflowFailurePolicies(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			var mu sync.Mutex
			failNow := true
			var cleanupErr error
			cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: mode, Concurrency: 2}},
				MaintenanceInterval: 50 * time.Millisecond}
			startWorker(t, b.url, cfg, noop("ok"),
				runtime.Registration{Kind: "flaky", Handler: func(ctx context.Context, job *runtime.Job) error {
					mu.Lock()
					defer mu.Unlock()
					if failNow {
						return runtime.NoRetry(errors.New("broken"))
					}
					return job.SetResult(map[string]int{"n": 7})
				}},
				runtime.Registration{Kind: "cleanup", Handler: func(ctx context.Context, job *runtime.Job) error {
					var p struct {
						In runtime.Input[map[string]int] `json:"in"`
					}
					if err := json.Unmarshal(job.Payload, &p); err != nil {
						return err
					}
					_, err := p.In.Get(ctx, job)
					mu.Lock()
					cleanupErr = err
					mu.Unlock()
					return nil
				}})

			// CancelDependent and RunAnyway.
			wf := runtime.NewWorkflow("policies")
			flaky := runtime.StepWithResult[map[string]int]{Step: wf.Add(req("flaky"))}
			child := wf.Add(req("ok"), runtime.After(flaky))
			grandchild := wf.Add(req("ok"), runtime.After(child))
			payload, err := json.Marshal(map[string]any{"in": flaky.Output().Anyway()})
			if err != nil {
				t.Fatal(err)
			}
			cleanup := wf.AddStep(runtime.EnqueueRequest{Kind: "cleanup", Payload: payload}, nil, flaky.Output().Anyway().Dep("In"))
			id, err := wf.Enqueue(ctx, b.pool)
			if err != nil {
				t.Fatal(err)
			}
			b.waitStatus(t, cleanup.JobID(), 30*time.Second, testdb.PgtaskJobStatusSucceeded)
			for _, s := range []runtime.Step{child, grandchild} {
				b.waitStatus(t, s.JobID(), 10*time.Second, testdb.PgtaskJobStatusCancelled)
			}
			mu.Lock()
			if !errors.Is(cleanupErr, runtime.ErrParentFailed) {
				t.Fatalf("clean-up read %v, want ErrParentFailed", cleanupErr)
			}
			failNow = false
			mu.Unlock()
			if s := waitWorkflow(t, b, id, 10*time.Second); s.Status != runtime.WorkflowFailed || s.Failed != 1 || s.Cancelled != 2 {
				t.Fatalf("workflow %+v", s)
			}
			// The retry resumes the workflow.
			if ok, err := runtime.RetryJob(ctx, b.pool, flaky.JobID()); err != nil || !ok {
				t.Fatalf("retry: %v %v", ok, err)
			}
			for _, s := range []runtime.Step{flaky.Step, child, grandchild} {
				b.waitStatus(t, s.JobID(), 30*time.Second, testdb.PgtaskJobStatusSucceeded)
			}
			if s := waitWorkflow(t, b, id, 10*time.Second); s.Status != runtime.WorkflowSucceeded {
				t.Fatalf("workflow after the retry %+v", s)
			}

			// CancelWorkflow.
			mu.Lock()
			failNow = true
			mu.Unlock()
			wf = runtime.NewWorkflow("cancel-all")
			f := wf.Add(req("flaky"))
			slow := wf.Add(req("ok", runtime.WithDelay(time.Hour)))
			wf.Add(req("ok"), runtime.AfterOrCancelWorkflow(f))
			wf.Add(req("ok"), runtime.After(slow))
			id, err = wf.Enqueue(ctx, b.pool)
			if err != nil {
				t.Fatal(err)
			}
			s := waitWorkflow(t, b, id, 30*time.Second)
			if s.Status != runtime.WorkflowCancelled || s.CancelledAt == nil || s.Failed != 1 || s.Cancelled != 3 {
				t.Fatalf("cancelled workflow %+v", s)
			}
		})
	}
}

// Enqueue refuses what it cannot make a workflow of, before sending
// anything.
func TestWorkflowEnqueueRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	other := runtime.NewWorkflow("other")
	foreign := runtime.StepWithResult[int]{Step: other.Add(req("x"))}
	var unset runtime.Input[int]
	for name, c := range map[string]struct {
		build func() *runtime.Workflow
		want  string
	}{
		"empty":   {func() *runtime.Workflow { return runtime.NewWorkflow("e") }, "at least one step"},
		"no name": {func() *runtime.Workflow { w := runtime.NewWorkflow(""); w.Add(req("x")); return w }, "name is empty"},
		"unset input": {func() *runtime.Workflow {
			w := runtime.NewWorkflow("u")
			w.Add(req("x"))
			w.AddStep(req("y"), nil, unset.Dep("Page"))
			return w
		}, "input Page is not set from a step of this workflow"},
		"another workflow's step": {func() *runtime.Workflow {
			w := runtime.NewWorkflow("a")
			w.Add(req("x"), runtime.After(foreign))
			return w
		}, "names a step of another workflow"},
		"another workflow's output": {func() *runtime.Workflow {
			w := runtime.NewWorkflow("a")
			w.AddStep(req("x"), nil, foreign.Output().Dep("In"))
			return w
		}, "input In names a step of another workflow"},
		"unique": {func() *runtime.Workflow {
			w := runtime.NewWorkflow("q")
			w.Add(req("x", runtime.WithUniqueKey("k")))
			return w
		}, "cannot be unique"},
		"run at on a dependent": {func() *runtime.Workflow {
			w := runtime.NewWorkflow("r")
			s := w.Add(req("x"))
			w.Add(req("y", runtime.WithDelay(time.Minute)), runtime.After(s))
			return w
		}, "cannot have RunAt or Delay"},
		"no kind": {func() *runtime.Workflow {
			w := runtime.NewWorkflow("k")
			w.Add(runtime.EnqueueRequest{Payload: []byte(`{}`)})
			return w
		}, "kind"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.build().Enqueue(ctx, b.pool)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error saying %q", err, c.want)
			}
		})
	}
	var n int
	if err := b.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM pgtask.jobs) + (SELECT count(*) FROM pgtask.workflows)").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d rows inserted by refused workflows", n)
	}
	// Enqueued once only.
	w := runtime.NewWorkflow("once")
	w.Add(req("x"))
	if _, err := w.Enqueue(ctx, b.pool); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Enqueue(ctx, b.pool); err == nil || !strings.Contains(err.Error(), "enqueued already") {
		t.Fatalf("second enqueue: %v", err)
	}
}
