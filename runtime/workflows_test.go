package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
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

// waitWorkflowProgress waits until workflow id has no step left to run,
// failing when no step has finished for stall.
func waitWorkflowProgress(t *testing.T, b *bundle, id runtime.WorkflowID, stall time.Duration) *runtime.WorkflowState {
	t.Helper()
	last, since := -1, time.Now()
	for {
		s, err := runtime.GetWorkflow(context.Background(), b.pool, id)
		if err != nil {
			t.Fatal(err)
		}
		if s.Status != runtime.WorkflowRunning && s.Waiting+s.Queued+s.Started == 0 {
			return s
		}
		if done := s.Succeeded + s.Failed + s.Cancelled; done != last {
			last, since = done, time.Now()
		} else if time.Since(since) > stall {
			t.Fatalf("workflow %d: no step finished for %s: %+v", id, stall, s)
		}
		time.Sleep(20 * time.Millisecond)
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
			notes, err := b.q.WorkflowNotesLeft(ctx)
			if err != nil {
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
	// A chain runs one step at a time: on a loaded machine it may take
	// long, so the wait fails when no step succeeds for 30 s.
	s = waitWorkflowProgress(t, b, id, 30*time.Second)
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
	n, err := b.q.JobAndWorkflowRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d rows inserted by refused workflows", n)
	}
	// Enqueued in a transaction that rolls back, then again: the second
	// Enqueue makes the workflow, and the ids name its jobs.
	w := runtime.NewWorkflow("again")
	first := w.Add(req("x"))
	w.Add(req("x"), runtime.After(first))
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Enqueue(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	id, err := w.Enqueue(ctx, b.pool)
	if err != nil {
		t.Fatalf("enqueue after a rollback: %v", err)
	}
	if s, err := runtime.GetWorkflow(ctx, b.pool, id); err != nil || s.Steps != 2 || w.ID() != id {
		t.Fatalf("workflow %+v, %v", s, err)
	}
	for _, j := range w.JobIDs() {
		if _, err := b.q.GetJob(ctx, int64(j)); err != nil {
			t.Fatalf("job %d of the workflow: %v", j, err)
		}
	}
}

// Finishers of a fan-in's parents never wait for each other: one that
// finds the child's waits row locked by another (which keeps it until its
// commit, as a held batch does) leaves a note and goes on at once, and the
// note is applied exactly once, by the next finisher or by maintenance.
func TestWorkflowFanInFinishersNeverWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("fan-in")
	var parents []runtime.Stepper
	for range 4 {
		parents = append(parents, wf.Add(req("p")))
	}
	var deps []runtime.StepOption
	for _, p := range parents {
		deps = append(deps, runtime.After(p))
	}
	child := wf.Add(req("c"), deps...)
	if _, err := wf.Enqueue(ctx, b.pool); err != nil {
		t.Fatal(err)
	}
	ids := wf.JobIDs()
	finish := func(tx testdb.DBTX, id runtime.JobID) {
		t.Helper()
		n, err := testdb.New(tx).FinishJobAs(ctx, testdb.FinishJobAsParams{ID: int64(id), Status: testdb.PgtaskJobStatusSucceeded})
		if err != nil || n != 1 {
			t.Fatalf("finish %d: %d, %v", id, n, err)
		}
	}
	wait := func() testdb.WorkflowWaitRow {
		t.Helper()
		w, err := b.q.WorkflowWait(ctx, int64(child.JobID()))
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	notes := func() int32 {
		t.Helper()
		n, err := b.q.WorkflowNotesLeft(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// A finishes parent 0 and holds the child's row until it commits.
	a, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Rollback(ctx) //nolint:errcheck // committed below
	finish(a, ids[0])
	// B finishes parents 1 and 2 meanwhile, and would fail on any lock
	// wait longer than 200 ms.
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if err := testdb.New(conn).SetLockTimeout(ctx, "200ms"); err != nil {
		t.Fatal(err)
	}
	defer testdb.New(conn).SetLockTimeout(ctx, "0") //nolint:errcheck // the pool's session goes back as it was
	bt, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	finish(bt, ids[1])
	finish(bt, ids[2])
	if err := bt.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := notes(); n != 2 {
		t.Fatalf("%d notes after the finishes that found the row locked, want 2", n)
	}
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if w := wait(); w.Remaining != 3 {
		t.Fatalf("child waits for %d, want 3 (the notes not applied yet)", w.Remaining)
	}
	// The last parent's finisher takes the row, applies the notes with its
	// own outcome, and releases the child in its transaction.
	finish(b.pool, ids[3])
	if w, n := wait(), notes(); w.Remaining != 0 || n != 0 {
		t.Fatalf("after the last finish: waits for %d, %d notes left", w.Remaining, n)
	}
	if j := b.job(t, child.JobID()); j.Status != testdb.PgtaskJobStatusQueued {
		t.Fatalf("child %s, want queued", j.Status)
	}
	// Applying again changes nothing.
	if n, err := b.q.ApplyWorkflowNotesNow(ctx); err != nil || n != 0 {
		t.Fatalf("applied %d again, %v", n, err)
	}
}

// The last parent's note, left while another finisher held the child's
// row, is applied by maintenance once that one commits: the child is
// released once.
func TestWorkflowLastNoteAppliedByMaintenance(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("fan-in")
	p0, p1 := wf.Add(req("p")), wf.Add(req("p"))
	child := wf.Add(req("c"), runtime.After(p0), runtime.After(p1))
	if _, err := wf.Enqueue(ctx, b.pool); err != nil {
		t.Fatal(err)
	}
	a, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Rollback(ctx) //nolint:errcheck // committed below
	if _, err := testdb.New(a).FinishJobAs(ctx, testdb.FinishJobAsParams{ID: int64(p0.JobID()), Status: testdb.PgtaskJobStatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.q.FinishJobAs(ctx, testdb.FinishJobAsParams{ID: int64(p1.JobID()), Status: testdb.PgtaskJobStatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	if n, err := b.q.ApplyWorkflowNotesNow(ctx); err != nil || n != 0 {
		t.Fatalf("applied %d while the row was locked, %v", n, err)
	}
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if j := b.job(t, child.JobID()); j.Status != testdb.PgtaskJobStatusScheduled {
		t.Fatalf("child %s before the note was applied", j.Status)
	}
	var wg sync.WaitGroup
	applied := make([]int32, 4)
	for i := range applied {
		wg.Go(func() {
			n, err := b.q.ApplyWorkflowNotesNow(ctx)
			if err != nil {
				t.Error(err)
			}
			applied[i] = n
		})
	}
	wg.Wait()
	total := int32(0)
	for _, n := range applied {
		total += n
	}
	if total != 1 {
		t.Fatalf("notes applied %v times in all, want once", applied)
	}
	if j := b.job(t, child.JobID()); j.Status != testdb.PgtaskJobStatusQueued {
		t.Fatalf("child %s, want queued", j.Status)
	}
}

// A fan-in of 1,500 parents with a chain behind it, worked by three
// workers in each mode while their job transactions are terminated
// (pg_terminate_backend) again and again: the fan-in step and each step of
// the chain start only after all their parents succeeded, and the
// workflow succeeds, with no note left behind.
func TestWorkflowFanInUnderTerminations(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			rec := newStepRecorder(b)
			wf := runtime.NewWorkflow("fan-in")
			var opts []runtime.StepOption
			var parents []runtime.Step
			for range 1500 {
				p := wf.Add(req("p", runtime.WithMaxAttempts(100)))
				parents = append(parents, p)
				opts = append(opts, runtime.After(p))
			}
			fanIn := wf.Add(req("c", runtime.WithMaxAttempts(100)), opts...)
			chain := []runtime.Step{fanIn}
			for range 10 {
				chain = append(chain, wf.Add(req("c", runtime.WithMaxAttempts(100)), runtime.After(chain[len(chain)-1])))
			}
			id, err := wf.Enqueue(ctx, b.pool)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range parents {
				rec.expect(fanIn.JobID(), p.JobID())
			}
			for i := 1; i < len(chain); i++ {
				rec.expect(chain[i].JobID(), chain[i-1].JobID())
			}
			slow := func(kind string) runtime.Registration {
				r := rec.handler(kind)
				h := r.Handler
				r.Handler = func(ctx context.Context, job *runtime.Job) error {
					time.Sleep(time.Millisecond)
					return h(ctx, job)
				}
				return r
			}
			cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: mode, Concurrency: 8}},
				MaintenanceInterval: 50 * time.Millisecond}
			for range 3 {
				startWorker(t, b.url, cfg, slow("p"), slow("c"))
			}
			stop := make(chan struct{})
			var killed sync.WaitGroup
			// terminated counts the sessions ended, settlers those of them
			// that were recording outcomes; succeeded is the workflow's
			// count of succeeded steps, as the wait below last read it.
			var terminated, settlers, succeeded atomic.Int64
			killed.Go(func() {
				settledAt := int64(-1)
				for {
					select {
					case <-stop:
						return
					case <-time.After(30 * time.Millisecond):
					}
					// Held mode's job transactions sit idle in
					// transaction while handlers run; lease mode's
					// sessions matter while they record outcomes.
					n, err := b.q.TerminateJobTransactions(ctx, 1)
					if err == nil {
						terminated.Add(int64(n))
					}
					// At most 100 of them, each once a step has succeeded
					// since the one before. A worker records outcomes
					// again on a new session, whose first call of the
					// settle function is its slowest (its backend has yet
					// to load the catalogs and compile the functions);
					// on a loaded machine that call outlasts the 30 ms
					// between terminations, so each would end the retry
					// of the one before, while the workers' backoff
					// spaces their retries out to seconds: no outcome
					// would be recorded until the 100 were spent,
					// minutes later.
					if mode == runtime.ModeLease && terminated.Load() < 100 && succeeded.Load() > settledAt {
						n, err = b.q.TerminateSettlers(ctx, 1)
						if err == nil && n > 0 {
							terminated.Add(int64(n))
							settlers.Add(int64(n))
							settledAt = succeeded.Load()
						}
					}
				}
			})
			// Terminations go on until the parents have succeeded; the
			// wait fails only when no step succeeds for 30 s, however
			// slowly a loaded machine gets through.
			last, lastAt := int64(-1), time.Now()
			for {
				s, err := runtime.GetWorkflow(ctx, b.pool, id)
				if err != nil {
					close(stop)
					killed.Wait()
					t.Fatal(err)
				}
				succeeded.Store(int64(s.Succeeded))
				if s.Succeeded >= 1500 || s.Status != runtime.WorkflowRunning {
					break
				}
				if int64(s.Succeeded) > last {
					last, lastAt = int64(s.Succeeded), time.Now()
				} else if time.Since(lastAt) > 30*time.Second {
					close(stop)
					killed.Wait()
					t.Fatalf("under terminations (%d sessions, %d of them recording outcomes), no step succeeded for 30s, %d of 1500 did: %+v",
						terminated.Load(), settlers.Load(), s.Succeeded, s)
				}
				time.Sleep(20 * time.Millisecond)
			}
			close(stop)
			killed.Wait()
			s := waitWorkflow(t, b, id, 60*time.Second)
			if s.Status != runtime.WorkflowSucceeded {
				t.Fatalf("workflow %+v", s)
			}
			rec.mu.Lock()
			bad := rec.bad
			fanInStarts := rec.starts[fanIn.JobID()]
			rec.mu.Unlock()
			if len(bad) > 0 {
				t.Fatalf("%d violations, first: %s", len(bad), bad[0])
			}
			if j := b.job(t, fanIn.JobID()); int(j.Attempts) != fanInStarts {
				t.Fatalf("fan-in step started %d times in %d attempts", fanInStarts, j.Attempts)
			}
			if n, err := b.q.WorkflowNotesLeft(ctx); err != nil || n != 0 {
				t.Fatalf("%d notes left, %v", n, err)
			}
			written, _ := b.q.WorkflowNotesWritten(ctx)
			t.Logf("%d sessions terminated, %d of them recording outcomes, about %d notes left and applied", terminated.Load(), settlers.Load(), written)
		})
	}
}

// With roles granted, own jobs only: a producer enqueues a workflow and
// reads its state (not another's), a worker role works it, failing a
// step, and an admin role's retry of that step resumes it.
func TestWorkflowsUnderRoles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := grantTestRoles(t, b, true)
	producer := poolAs(t, b, r.Producer)
	admin := poolAs(t, b, r.Admin)

	theirs := runtime.NewWorkflow("theirs")
	theirs.Add(req("ok"))
	theirID, err := theirs.Enqueue(ctx, b.pool)
	if err != nil {
		t.Fatal(err)
	}
	wf := runtime.NewWorkflow("mine")
	first := wf.Add(req("flaky"))
	second := wf.Add(req("ok"), runtime.After(first))
	id, err := wf.Enqueue(ctx, producer)
	if err != nil {
		t.Fatalf("a producer's workflow: %v", err)
	}
	if _, err := runtime.GetWorkflow(ctx, producer, theirID); !errors.Is(err, runtime.ErrWorkflowNotFound) {
		t.Fatalf("the producer reading another's workflow: %v, want ErrWorkflowNotFound", err)
	}
	var mu sync.Mutex
	fail := true
	startWorker(t, urlAs(t, b.url, r.Worker), runtime.Config{MaintenanceInterval: 20 * time.Millisecond}, noop("ok"),
		runtime.Registration{Kind: "flaky", Handler: func(context.Context, *runtime.Job) error {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				return runtime.NoRetry(errors.New("broken"))
			}
			return nil
		}})
	b.waitStatus(t, second.JobID(), 30*time.Second, testdb.PgtaskJobStatusCancelled)
	if s, err := runtime.GetWorkflow(ctx, producer, id); err != nil || s.Status != runtime.WorkflowFailed {
		t.Fatalf("the producer reading its workflow: %+v, %v", s, err)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	if ok, err := runtime.RetryJob(ctx, admin, first.JobID()); err != nil || !ok {
		t.Fatalf("the admin's retry: %v, %v", ok, err)
	}
	b.waitStatus(t, second.JobID(), 30*time.Second, testdb.PgtaskJobStatusSucceeded)
	if ok, err := runtime.CancelWorkflowByID(ctx, admin, theirID); err != nil || !ok {
		t.Fatalf("the admin's cancel of a workflow: %v, %v", ok, err)
	}
}

// Retention deletes a workflow's bookkeeping once none of its jobs is left
// and it is older than the longest of the jobs' ages, and keeps a workflow
// with a job left.
// So it does when retention keeps jobs of some status forever.
func TestRetentionDeletesFinishedWorkflows(t *testing.T) {
	t.Parallel()
	for name, keep := range map[string]runtime.Retention{
		"every status aged": {Succeeded: time.Hour, Failed: 2 * time.Hour, Cancelled: time.Hour, Interval: time.Hour},
		"successes kept":    {Succeeded: -1, Failed: 2 * time.Hour, Cancelled: time.Hour, Interval: time.Hour},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testRetentionDeletesFinishedWorkflows(t, keep)
		})
	}
}

func testRetentionDeletesFinishedWorkflows(t *testing.T, keep runtime.Retention) {
	b := setup(t)
	ctx := context.Background()
	w := idleWorker(t, b.url, runtime.Config{Retention: keep})
	newWorkflow := func() (runtime.WorkflowID, []runtime.JobID) {
		t.Helper()
		wf := runtime.NewWorkflow("old")
		s := wf.Add(req("later", runtime.WithDelay(time.Hour)))
		wf.Add(req("later"), runtime.After(s))
		id, err := wf.Enqueue(ctx, b.pool)
		if err != nil {
			t.Fatal(err)
		}
		return id, wf.JobIDs()
	}
	done, doneJobs := newWorkflow()
	kept, keptJobs := newWorkflow()
	for _, j := range []runtime.JobID{doneJobs[0], keptJobs[0]} {
		if ok, err := runtime.CancelJob(ctx, b.pool, j); err != nil || !ok {
			t.Fatalf("cancel: %v %v", ok, err)
		}
	}
	// The first workflow's jobs finished long ago (and go); the second's
	// head finished long ago too, but its other step (cancelled just now)
	// stays.
	for _, j := range append(doneJobs, keptJobs[0]) {
		if err := b.q.BackdateFinished(ctx, testdb.BackdateFinishedParams{ID: int64(j), AgeSeconds: (3 * time.Hour).Seconds()}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []runtime.WorkflowID{done, kept} {
		if err := b.q.BackdateWorkflow(ctx, testdb.BackdateWorkflowParams{ID: int64(id), AgeSeconds: (3 * time.Hour).Seconds()}); err != nil {
			t.Fatal(err)
		}
	}
	w.LeaderStep(ctx)
	if !w.IsLeader() {
		t.Fatal("the worker was not elected")
	}
	w.RetainStep(ctx)
	w.RetainStep(ctx)
	if _, err := runtime.GetWorkflow(ctx, b.pool, done); !errors.Is(err, runtime.ErrWorkflowNotFound) {
		t.Errorf("the workflow whose jobs are all gone: %v, want it deleted", err)
	}
	if n, err := b.q.WorkflowRowsLeft(ctx, int64(done)); err != nil || n != 0 {
		t.Errorf("%d rows of its bookkeeping left, %v", n, err)
	}
	if s, err := runtime.GetWorkflow(ctx, b.pool, kept); err != nil || s.Deleted != 1 || s.Cancelled != 1 {
		t.Errorf("the workflow with a job left: %+v, %v; want it kept", s, err)
	}
}

// Steps that are grouped, limited, rate-limited, of a fair queue's
// tenant or of another queue wait for their parent like any step, and
// then run as any job of their kind does: each is released into its
// group, its limit key, its rate key, its tenant's turn or its queue.
func TestWorkflowStepsKeepTheirOptions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("options")
	root := wf.Add(req("step"))
	var steps []runtime.Step
	for _, opt := range []runtime.EnqueueOption{
		runtime.WithGroup("g"), runtime.WithLimit("k", 1), runtime.WithRate("r", 100, time.Second),
		runtime.WithTenant("acme"), runtime.WithQueue("other"), runtime.WithPriority(5),
	} {
		steps = append(steps, wf.Add(req("step", opt), runtime.After(root)))
	}
	id, err := wf.Enqueue(ctx, b.pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		if j := b.job(t, s.JobID()); j.Status != testdb.PgtaskJobStatusScheduled {
			t.Fatalf("step %d is %s before its parent ran", s.JobID(), j.Status)
		}
	}
	cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {}, "other": {Mode: runtime.ModeLease}},
		MaintenanceInterval: 20 * time.Millisecond}
	startWorker(t, b.url, cfg, noop("step"))
	if s := waitWorkflow(t, b, id, 30*time.Second); s.Status != runtime.WorkflowSucceeded || s.Succeeded != 7 {
		t.Fatalf("workflow %+v", s)
	}
	for _, s := range steps {
		if j := b.job(t, s.JobID()); j.Attempts != 1 || !j.StartedAt.After(b.job(t, root.JobID()).FinishedAt.Add(-time.Millisecond)) {
			t.Fatalf("step %d: %d attempts, started %v, its parent finished %v", s.JobID(), j.Attempts, j.StartedAt, b.job(t, root.JobID()).FinishedAt)
		}
	}
}
