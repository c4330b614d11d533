package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// A failure's cascade tells its steps a level at a time, not a step at a
// time: the PL/pgSQL calls that an operator's cancel of a fan-out's root
// makes in its transaction (each dependent with a dependent of its own
// under each policy) are as many for 400 dependents as for 40. Made a
// step at a time, they grow with the steps, and so does the time the
// transaction holds its locks.
func TestWorkflowCascadeCostsNoCallPerStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cascade := func(n int) int64 {
		wf := runtime.NewWorkflow("fan")
		root := wf.Add(req("x"))
		var children, cancelled, released []runtime.Step
		for range n {
			c := wf.Add(req("x"), runtime.After(root))
			children = append(children, c)
			cancelled = append(cancelled, wf.Add(req("x"), runtime.After(c)))
			released = append(released, wf.Add(req("x"), runtime.AfterAnyway(c)))
		}
		enqueueIdle(t, b, wf)
		calls := plCallsCommitted(t, b, func(tx pgx.Tx) {
			if ok, err := runtime.CancelJob(ctx, tx, root.JobID()); err != nil || !ok {
				t.Fatalf("cancel: %v %v", ok, err)
			}
		})
		for _, s := range slices.Concat(children, cancelled) {
			if j := b.job(t, s.JobID()); j.Status != testdb.PgtaskJobStatusCancelled {
				t.Fatalf("step %d is %s, want cancelled", s.JobID(), j.Status)
			}
		}
		for _, s := range released {
			if j := b.job(t, s.JobID()); j.Status != testdb.PgtaskJobStatusQueued {
				t.Fatalf("clean-up step %d is %s, want queued", s.JobID(), j.Status)
			}
		}
		return calls
	}
	callsDoNotGrow(t, "the cascade", "dependents", 40, 400, cascade)
}

// callsDoNotGrow fails t unless what, done over large units, makes no more
// PL/pgSQL calls (calls counts them, see plCallsCommitted) than over small
// units, and some: a step at a time, they would grow with the units.
func callsDoNotGrow(t *testing.T, what, units string, small, large int, calls func(n int) int64) {
	t.Helper()
	s, l := calls(small), calls(large)
	t.Logf("PL/pgSQL calls of %s: %d for %d %s, %d for %d", what, s, small, units, l, large)
	if s == 0 {
		t.Fatalf("no PL/pgSQL call counted for %s: the count measures nothing", what)
	}
	if l > s {
		t.Fatalf("%s of %d %s made %d PL/pgSQL calls, of %d %d: it works a step at a time", what, large, units, l, small, s)
	}
}

// plCallsCommitted runs do in a transaction on b's pool, commits it, and
// returns the PL/pgSQL function calls do made in it.
func plCallsCommitted(t *testing.T, b *bundle, do func(pgx.Tx)) int64 {
	t.Helper()
	ctx := context.Background()
	tx := beginTx(t, b)
	q := b.q.WithTx(tx)
	if err := q.TrackPLFunctionCalls(ctx); err != nil {
		t.Fatal(err)
	}
	// The counts a session has not reported yet include its earlier
	// transactions': do's are the difference.
	before, err := q.FunctionCallsThisTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	do(tx)
	after, err := q.FunctionCallsThisTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return after - before
}

// An operator's retry of a failed fan-out root restores what its failure
// cancelled a level at a time too: its dependents, some grouped (several
// to a group, or one each) and some not, wait for it again, parked, and
// so do their own dependents, which their cancel had cancelled in turn.
// The PL/pgSQL calls the retry makes in its transaction are as many for
// 400 dependents as for 40; a step at a time (a retry_job call and its
// triggers for each grouped step, a trigger call for each step parked
// again), they grow with the steps.
func TestWorkflowRestoreCostsNoCallPerStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	restore := func(n int) int64 {
		wf := runtime.NewWorkflow("fan")
		root := wf.Add(req("x"))
		var restored []runtime.Step
		// Groups of their own in each run, so that both find the same.
		for i := range n {
			var opts []runtime.EnqueueOption
			switch i % 3 {
			case 0:
				opts = append(opts, runtime.WithGroup(fmt.Sprintf("%d-shared-%d", n, i%4)))
			case 1:
				opts = append(opts, runtime.WithGroup(fmt.Sprintf("%d-own-%d", n, i)))
			}
			c := wf.Add(req("x", opts...), runtime.After(root))
			restored = append(restored, c, wf.Add(req("x", runtime.WithGroup(fmt.Sprintf("%d-next-%d", n, i%5))), runtime.After(c)))
		}
		enqueueIdle(t, b, wf)
		if _, err := b.q.FinishJobAs(ctx, testdb.FinishJobAsParams{ID: int64(root.JobID()), Status: testdb.PgtaskJobStatusFailed}); err != nil {
			t.Fatal(err)
		}
		for _, s := range restored {
			if j := b.job(t, s.JobID()); j.Status != testdb.PgtaskJobStatusCancelled {
				t.Fatalf("step %d is %s after its root failed, want cancelled", s.JobID(), j.Status)
			}
		}
		calls := plCallsCommitted(t, b, func(tx pgx.Tx) {
			if ok, err := runtime.RetryJob(ctx, tx, root.JobID()); err != nil || !ok {
				t.Fatalf("retry: %v %v", ok, err)
			}
		})
		steps, err := runtime.WorkflowSteps(ctx, b.pool, wf.ID(), 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		byID := map[runtime.JobID]runtime.WorkflowStep{}
		for _, s := range steps {
			byID[s.JobID] = s
		}
		for _, s := range restored {
			st := byID[s.JobID()]
			if st.Status != runtime.StatusScheduled || !st.Waiting || st.WaitingFor != 1 || st.Attempts != 0 {
				t.Fatalf("step %d after its root's retry: %s, waiting %v for %d, %d attempts; want parked, waiting for 1, no attempt",
					s.JobID(), st.Status, st.Waiting, st.WaitingFor, st.Attempts)
			}
			if w, err := b.q.WorkflowWait(ctx, int64(s.JobID())); err != nil || w.CancelledBy != 0 {
				t.Fatalf("step %d still cancelled by %d (%v)", s.JobID(), w.CancelledBy, err)
			}
		}
		return calls
	}
	callsDoNotGrow(t, "the restore", "dependents", 40, 400, restore)
}

// A wide fan-out whose root fails for good while three workers of each
// mode work the workflow's other steps: the root's dependents c_i under
// After, and theirs, are cancelled and never start; each clean-up step
// a_i after c_i (AfterAnyway) and after a step o_i of its own (After) runs
// once, only when c_i is cancelled and o_i succeeded. Some o_i finish at
// the moment the root fails (they wait for one signal), the others while
// the cascade is told, so finishers of the same a_i race: one takes its
// waits row and the other leaves a note, and no note is left at the end.
func TestWorkflowFailureCascadeUnderWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("cascade")
	root := wf.Add(req("fails"))
	type parent struct {
		id   runtime.JobID
		want runtime.Status
	}
	var doomed, anyway, others []runtime.Step
	parents := map[runtime.JobID][]parent{}
	for range 400 {
		c := wf.Add(req("ok"), runtime.After(root))
		o := wf.Add(req("other"))
		others = append(others, o)
		doomed = append(doomed, c, wf.Add(req("ok"), runtime.After(c)))
		a := wf.Add(req("ok"), runtime.AfterAnyway(c), runtime.After(o))
		parents[a.JobID()] = []parent{{c.JobID(), runtime.StatusCancelled}, {o.JobID(), runtime.StatusSucceeded}}
		anyway = append(anyway, a)
	}
	for range 50 {
		a := wf.Add(req("ok"), runtime.AfterAnyway(root))
		parents[a.JobID()] = []parent{{root.JobID(), runtime.StatusFailed}}
		anyway = append(anyway, a)
	}
	// The root and the first few o_i to start wait for the gate; fewer
	// than the workers' slots, so that the root is always run.
	const gated = 6
	gate := make(chan struct{})
	var mu sync.Mutex
	started := map[runtime.JobID]int{}
	var bad []string
	rootStarted, waiting := false, 0
	check := func(ctx context.Context, job *runtime.Job) error {
		mu.Lock()
		started[job.ID]++
		ps := parents[job.ID]
		mu.Unlock()
		for _, p := range ps {
			j, err := runtime.GetJob(ctx, b.pool, p.id)
			if err != nil {
				return err
			}
			if j.Status != p.want {
				mu.Lock()
				bad = append(bad, "a step started while its parent was "+string(j.Status)+", not "+string(p.want))
				mu.Unlock()
			}
		}
		return nil
	}
	regs := []runtime.Registration{
		{Kind: "ok", Handler: check},
		{Kind: "other", Handler: func(ctx context.Context, job *runtime.Job) error {
			mu.Lock()
			started[job.ID]++
			wait := waiting < gated
			if wait {
				waiting++
			}
			mu.Unlock()
			if wait {
				<-gate
			}
			return nil
		}},
		{Kind: "fails", Handler: func(ctx context.Context, job *runtime.Job) error {
			mu.Lock()
			rootStarted = true
			mu.Unlock()
			<-gate
			return runtime.NoRetry(errors.New("broken"))
		}},
	}
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		for range 3 {
			startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: mode, Concurrency: 2}},
				MaintenanceInterval: 50 * time.Millisecond}, regs...)
		}
	}
	id, err := wf.Enqueue(ctx, b.pool)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		ready := rootStarted && waiting == gated
		mu.Unlock()
		if ready {
			break
		}
		if time.Now().After(deadline) {
			close(gate)
			t.Fatal("the root and the gated steps did not all start within 30s")
		}
	}
	close(gate)
	s := waitWorkflowProgress(t, b, id, 60*time.Second)
	if s.Status != runtime.WorkflowFailed || s.Failed != 1 || s.Cancelled != len(doomed) || s.Succeeded != len(anyway)+len(others) {
		t.Fatalf("workflow %+v", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("%d violations, first: %s", len(bad), bad[0])
	}
	for _, d := range doomed {
		if started[d.JobID()] != 0 {
			t.Fatalf("step %d under the failed root started", d.JobID())
		}
		if j := b.job(t, d.JobID()); j.Status != testdb.PgtaskJobStatusCancelled {
			t.Fatalf("step %d under the failed root is %s", d.JobID(), j.Status)
		}
	}
	for _, f := range slices.Concat(anyway, others) {
		if started[f.JobID()] != 1 {
			t.Fatalf("step %d started %d times", f.JobID(), started[f.JobID()])
		}
	}
	if n, err := b.q.WorkflowNotesLeft(ctx); err != nil || n != 0 {
		t.Fatalf("notes left: %d %v", n, err)
	}
	if n, err := b.q.WorkflowNotesWritten(ctx); err == nil {
		t.Logf("notes left by finishers that met a locked waits row: %d", n)
	}
}

// Diamonds under mixed policies over several levels, told as sets: a
// step whose two parents are cancelled in the same level is cancelled
// once, and its dependents are told once (a clean-up step after it counts
// it once); a clean-up step after both of them counts each once and runs.
// A retry of the root makes every step the cascade cancelled wait again,
// and the whole workflow then runs, each step once.
func TestWorkflowCascadeThroughDiamonds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("diamonds")
	r := wf.Add(req("x"))
	s := wf.Add(req("x"))
	a := wf.Add(req("x"), runtime.After(r))
	bb := wf.Add(req("x"), runtime.After(r))
	d := wf.Add(req("x"), runtime.After(a), runtime.After(bb))
	e := wf.Add(req("x"), runtime.AfterAnyway(d), runtime.After(s))
	f := wf.Add(req("x"), runtime.After(d))
	g := wf.Add(req("x"), runtime.AfterAnyway(a), runtime.AfterAnyway(bb))
	h := wf.Add(req("x"), runtime.After(f), runtime.After(g))
	id := enqueueIdle(t, b, wf)

	if ok, err := runtime.CancelJob(ctx, b.pool, r.JobID()); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	status := func(st runtime.Step) testdb.PgtaskJobStatus { return b.job(t, st.JobID()).Status }
	wait := func(st runtime.Step) testdb.WorkflowWaitRow {
		w, err := b.q.WorkflowWait(ctx, int64(st.JobID()))
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	for _, st := range []runtime.Step{a, bb, d, f, h} {
		if got := status(st); got != testdb.PgtaskJobStatusCancelled {
			t.Fatalf("step %d is %s, want cancelled", st.JobID(), got)
		}
	}
	if w := wait(d); w.CancelledBy != int64(a.JobID()) && w.CancelledBy != int64(bb.JobID()) {
		t.Fatalf("d cancelled by %d", w.CancelledBy)
	}
	for _, p := range []runtime.Step{a, bb} {
		if o, err := b.q.WorkflowEdgeOutcome(ctx, testdb.WorkflowEdgeOutcomeParams{Parent: int64(p.JobID()), Child: int64(d.JobID())}); err != nil || o != "f" {
			t.Fatalf("d was told %q of %d: %v", o, p.JobID(), err)
		}
	}
	// e waits for s alone: d's failure counted once.
	if w := wait(e); w.Remaining != 1 || status(e) != testdb.PgtaskJobStatusScheduled {
		t.Fatalf("e waits for %d parents and is %s, want 1 and parked", w.Remaining, status(e))
	}
	// g counted both failures once each, and was released.
	if w := wait(g); w.Remaining != 0 || status(g) != testdb.PgtaskJobStatusQueued {
		t.Fatalf("g waits for %d parents and is %s, want 0 and queued", w.Remaining, status(g))
	}
	if _, err := b.q.FinishJobAs(ctx, testdb.FinishJobAsParams{ID: int64(s.JobID()), Status: testdb.PgtaskJobStatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	if got := status(e); got != testdb.PgtaskJobStatusQueued {
		t.Fatalf("e is %s after its last parent's success, want queued", got)
	}

	// The retry of the root: a, b, d, f and h wait again.
	if ok, err := runtime.RetryJob(ctx, b.pool, r.JobID()); err != nil || !ok {
		t.Fatalf("retry: %v %v", ok, err)
	}
	for _, st := range []runtime.Step{a, bb, d, f, h} {
		if got := status(st); got != testdb.PgtaskJobStatusScheduled {
			t.Fatalf("step %d is %s after the root's retry, want parked", st.JobID(), got)
		}
		if w := wait(st); w.CancelledBy != 0 {
			t.Fatalf("step %d still cancelled by %d", st.JobID(), w.CancelledBy)
		}
	}
	rec := newStepRecorder(b)
	for _, st := range []runtime.Step{a, bb} {
		rec.expect(st.JobID(), r.JobID())
	}
	rec.expect(d.JobID(), a.JobID(), bb.JobID())
	rec.expect(f.JobID(), d.JobID())
	rec.expect(h.JobID(), f.JobID(), g.JobID())
	startWorker(t, b.url, runtime.Config{MaintenanceInterval: 50 * time.Millisecond}, rec.handler("x"))
	if st := waitWorkflowProgress(t, b, id, 30*time.Second); st.Status != runtime.WorkflowSucceeded {
		t.Fatalf("workflow %+v", st)
	}
	// s finished by hand; the others ran once each.
	rec.verify(t, []runtime.JobID{r.JobID(), a.JobID(), bb.JobID(), d.JobID(), e.JobID(), f.JobID(), g.JobID(), h.JobID()})
}

// A cascade that crosses a grouped step lets its group move on, and a
// workflow cancelled by a failure under AfterOrCancelWorkflow gives back
// the slot of its limited step: the jobs waiting behind them run.
func TestWorkflowCascadeFreesGroupsAndSlots(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	// A grouped step, parked at the head of its group, cancelled by the
	// cascade: the group's next job runs.
	wf := runtime.NewWorkflow("grouped")
	r := wf.Add(req("x"))
	c := wf.Add(req("x"), runtime.After(r))
	g := wf.Add(req("x", runtime.WithGroup("g")), runtime.After(c))
	enqueueIdle(t, b, wf)
	next := enqueue(t, b.pool, "after", map[string]any{}, runtime.WithGroup("g"))
	if ok, err := runtime.CancelJob(ctx, b.pool, r.JobID()); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if j := b.job(t, g.JobID()); j.Status != testdb.PgtaskJobStatusCancelled {
		t.Fatalf("grouped step is %s", j.Status)
	}

	// A limited step that runs, and two that wait for its slot, in a
	// workflow that a failure cancels: the running one is asked to stop,
	// the waiting ones are cancelled, and a job of the same key runs.
	running := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	limitedStarts := 0
	regs := []runtime.Registration{
		noop("x"), noop("after"),
		{Kind: "limited", Handler: func(ctx context.Context, job *runtime.Job) error {
			mu.Lock()
			limitedStarts++
			mu.Unlock()
			once.Do(func() { close(running) })
			<-ctx.Done()
			return ctx.Err()
		}},
		{Kind: "fails", Handler: func(ctx context.Context, job *runtime.Job) error {
			select {
			case <-running:
			case <-ctx.Done():
				return ctx.Err()
			}
			return runtime.NoRetry(errors.New("broken"))
		}},
	}
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: mode, Concurrency: 3}},
			MaintenanceInterval: 50 * time.Millisecond}, regs...)
	}
	b.waitStatus(t, next, 30*time.Second, testdb.PgtaskJobStatusSucceeded)

	wf = runtime.NewWorkflow("limited")
	f := wf.Add(req("fails"))
	wf.Add(req("x"), runtime.AfterOrCancelWorkflow(f))
	for range 3 {
		wf.Add(req("limited", runtime.WithLimit("k", 1)))
	}
	id, err := wf.Enqueue(ctx, b.pool)
	if err != nil {
		t.Fatal(err)
	}
	s := waitWorkflowProgress(t, b, id, 30*time.Second)
	if s.Status != runtime.WorkflowCancelled || s.Failed != 1 || s.Cancelled != 4 {
		t.Fatalf("workflow %+v", s)
	}
	after := enqueue(t, b.pool, "after", map[string]any{}, runtime.WithLimit("k", 1))
	b.waitStatus(t, after, 30*time.Second, testdb.PgtaskJobStatusSucceeded)
	mu.Lock()
	defer mu.Unlock()
	if limitedStarts != 1 {
		t.Fatalf("limited steps started %d times, want 1 (the others waited for its slot)", limitedStarts)
	}
}

// A failure under 'w' deep in a cascade cancels the workflow before
// anything of that level is released: r's cancel cancels a and bb, theirs
// d, and d's failure cancels the workflow through w, so x (after d
// anyway) is never released, and y, released a level earlier, is
// cancelled with the rest.
func TestWorkflowCascadeCancelsItsWorkflowDeepDown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("deep-w")
	r := wf.Add(req("x"))
	a := wf.Add(req("x"), runtime.After(r))
	bb := wf.Add(req("x"), runtime.After(r))
	d := wf.Add(req("x"), runtime.After(a), runtime.After(bb))
	y := wf.Add(req("x"), runtime.AfterAnyway(a))
	w := wf.Add(req("x"), runtime.AfterOrCancelWorkflow(d))
	x := wf.Add(req("x"), runtime.AfterAnyway(d))
	id := enqueueIdle(t, b, wf)

	if ok, err := runtime.CancelJob(ctx, b.pool, r.JobID()); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	for _, st := range []runtime.Step{r, a, bb, d, y, w, x} {
		if got := b.job(t, st.JobID()).Status; got != testdb.PgtaskJobStatusCancelled {
			t.Fatalf("step %d is %s, want cancelled", st.JobID(), got)
		}
	}
	s, err := runtime.GetWorkflow(ctx, b.pool, id)
	if err != nil {
		t.Fatal(err)
	}
	if s.Status != runtime.WorkflowCancelled || s.Cancelled != 7 {
		t.Fatalf("workflow %+v", s)
	}
	if pending, err := b.q.WorkflowCancelPending(ctx, int64(id)); err != nil || pending {
		t.Fatalf("workflow's cancel left to maintenance: %v, %v", pending, err)
	}
}

// A step two failed parents cancelled waits again once both are retried,
// whichever is retried first: the retry of the parent not named as the
// one that cancelled it resets that edge too.
func TestWorkflowRetryOfBothParentsOfACancelledStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("two-parents")
	p1 := wf.Add(req("x"))
	p2 := wf.Add(req("x"))
	d := wf.Add(req("x"), runtime.After(p1), runtime.After(p2))
	enqueueIdle(t, b, wf)
	for _, p := range []runtime.Step{p1, p2} {
		if _, err := b.q.FinishJobAs(ctx, testdb.FinishJobAsParams{ID: int64(p.JobID()), Status: testdb.PgtaskJobStatusFailed}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := b.q.WorkflowWait(ctx, int64(d.JobID()))
	if err != nil {
		t.Fatal(err)
	}
	if w.CancelledBy != int64(p1.JobID()) {
		t.Fatalf("d cancelled by %d, want %d", w.CancelledBy, p1.JobID())
	}
	// The other parent first, then the one named.
	for _, p := range []runtime.Step{p2, p1} {
		if ok, err := runtime.RetryJob(ctx, b.pool, p.JobID()); err != nil || !ok {
			t.Fatalf("retry %d: %v %v", p.JobID(), ok, err)
		}
	}
	if got := b.job(t, d.JobID()).Status; got != testdb.PgtaskJobStatusScheduled {
		t.Fatalf("d is %s after both parents' retries, want parked", got)
	}
	if w, err := b.q.WorkflowWait(ctx, int64(d.JobID())); err != nil || w.CancelledBy != 0 || w.Remaining != 2 {
		t.Fatalf("d waits for %d parents, cancelled by %d (%v); want 2 and none", w.Remaining, w.CancelledBy, err)
	}
}

// An operator's retry of a failed step restores the grouped steps its
// failure cancelled while another operator retries one of those steps: the
// second holds the step's row, as retry_job takes it before its group's,
// while the first's restore runs; then it retries the step. Neither waits
// for the other forever (a deadlock ends one of them with an error).
func TestWorkflowRestoreRacingARetryOfItsStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("restore-lock")
	root := wf.Add(req("x"))
	step := wf.Add(req("x", runtime.WithGroup("restore-lock")), runtime.After(root))
	enqueueIdle(t, b, wf)
	if _, err := b.q.FinishJobAs(ctx, testdb.FinishJobAsParams{ID: int64(root.JobID()), Status: testdb.PgtaskJobStatusFailed}); err != nil {
		t.Fatal(err)
	}
	if j := b.job(t, step.JobID()); j.Status != testdb.PgtaskJobStatusCancelled {
		t.Fatalf("step %s after its parent failed, want cancelled", j.Status)
	}
	second := beginTx(t, b)
	if err := testdb.New(second).LockJobRow(ctx, int64(step.JobID())); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			first <- err
			return
		}
		defer tx.Rollback(ctx) //nolint:errcheck // after a commit, a no-op
		if _, err := runtime.RetryJob(ctx, tx, root.JobID()); err != nil {
			first <- err
			return
		}
		first <- tx.Commit(ctx)
	}()
	// The first retry's restore waits for the step's row.
	waitBlockedBy(t, b, second, "the root's retry")
	_, err := runtime.RetryJob(ctx, second, step.JobID())
	if err == nil {
		err = second.Commit(ctx)
	}
	if err != nil {
		t.Fatalf("the step's own retry: %v", err)
	}
	select {
	case err := <-first:
		if err != nil {
			t.Fatalf("the root's retry: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the root's retry did not end")
	}
}

// Telling a fan-in step of its parents' successes reads the edges of those
// parents, not every edge: a batch of 20 successes out of a fan-out of
// 3,000 steps reads about as many edge rows as it settles, whatever plan
// the tables' statistics (none here, as on a workflow just enqueued) would
// favour. A scan of the edges makes each batch cost the whole workflow.
func TestWorkflowSettleReadsOnlyTheEdgesOfItsSteps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const fan, settled = 3000, 20
	wf := runtime.NewWorkflow("fan")
	deps := make([]runtime.StepOption, 0, fan)
	for range fan {
		deps = append(deps, runtime.After(wf.Add(req("x"))))
	}
	fanIn := wf.Add(req("x"), deps...)
	enqueueIdle(t, b, wf)
	tx := beginTx(t, b)
	q, g := testdb.New(tx), gen.New(tx)
	claimed, err := g.ClaimJobs(ctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: settled, WorkerID: 1})
	if err != nil || len(claimed) != settled {
		t.Fatalf("claim: %d jobs, %v", len(claimed), err)
	}
	p := gen.SettleJobsParams{Queue: runtime.DefaultQueue}
	for _, c := range claimed {
		addSuccess(&p, c.ID, c.Attempts, 0)
	}
	before, err := q.WorkflowEdgeRowsReadHere(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := g.SettleJobs(ctx, p); err != nil || r.Recorded != settled {
		t.Fatalf("settle: %+v, %v", r, err)
	}
	after, err := q.WorkflowEdgeRowsReadHere(ctx)
	if err != nil {
		t.Fatal(err)
	}
	read := after.Fetched + after.Scanned - before.Fetched - before.Scanned
	t.Logf("edge rows read settling %d of %d parents: %d", settled, fan, read)
	if read < settled {
		t.Fatalf("%d edge rows read for %d parents told: the count measures nothing", read, settled)
	}
	if read > 5*settled {
		t.Fatalf("settling %d of %d parents read %d edge rows: it looks through the whole workflow", settled, fan, read)
	}
	w, err := q.WorkflowWait(ctx, int64(fanIn.JobID()))
	if err != nil {
		t.Fatal(err)
	}
	if w.Remaining != fan-settled {
		t.Fatalf("the fan-in step waits for %d parents, want %d", w.Remaining, fan-settled)
	}
}

// A batch of successes tells its steps' children as one set: the PL/pgSQL
// calls of one settle of 80 fan-out steps are as many as of 20. A trigger
// call per step (queueing each for the set) grows with the steps.
func TestWorkflowBatchSettleCostsNoCallPerStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	settle := func(n int) int64 {
		queue := fmt.Sprintf("fan%d", n)
		wf := runtime.NewWorkflow("fan")
		deps := make([]runtime.StepOption, 0, n)
		for range n {
			deps = append(deps, runtime.After(wf.Add(req("x", runtime.WithQueue(queue)))))
		}
		fanIn := wf.Add(req("x", runtime.WithQueue(queue)), deps...)
		enqueueIdle(t, b, wf)
		calls := plCallsCommitted(t, b, func(tx pgx.Tx) {
			g := gen.New(tx)
			claimed, err := g.ClaimJobs(ctx, gen.ClaimJobsParams{Queue: queue, Max: int32(n), WorkerID: 1})
			if err != nil || len(claimed) != n {
				t.Fatalf("claim: %d jobs, %v", len(claimed), err)
			}
			p := gen.SettleJobsParams{Queue: queue}
			for _, c := range claimed {
				addSuccess(&p, c.ID, c.Attempts, 0)
			}
			if r, err := g.SettleJobs(ctx, p); err != nil || r.Recorded != int32(n) {
				t.Fatalf("settle: %+v, %v", r, err)
			}
		})
		if j := b.job(t, fanIn.JobID()); j.Status != testdb.PgtaskJobStatusQueued {
			t.Fatalf("the fan-in step after %d successes is %s, want queued", n, j.Status)
		}
		return calls
	}
	callsDoNotGrow(t, "a settle", "steps", 20, 80, settle)
}

// A cascade writes each edge's outcome and each waits row in place: the
// cancel of a fan-out's root, which tells all 300 of its dependents and
// cancels them, updates their edges and waits rows with no index entry
// added (HOT), however densely the workflow's enqueue packed them.
func TestWorkflowCascadeWritesEdgesInPlace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("fan")
	root := wf.Add(req("x"))
	for range 300 {
		wf.Add(req("x"), runtime.After(root))
	}
	enqueueIdle(t, b, wf)
	tx := beginTx(t, b)
	if ok, err := runtime.CancelJob(ctx, tx, root.JobID()); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	rows, err := testdb.New(tx).WorkflowRowUpdatesHere(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("update counts of %d tables, want 2: %+v", len(rows), rows)
	}
	for _, r := range rows {
		t.Logf("%s: %d updates, %d HOT", r.TableName, r.Updates, r.Hot)
		if r.Updates < 300 {
			t.Fatalf("%s: %d updates counted for 300 dependents: the count measures nothing", r.TableName, r.Updates)
		}
		if r.Hot < r.Updates*9/10 {
			t.Errorf("%s: %d of %d updates were HOT: the others added index entries", r.TableName, r.Hot, r.Updates)
		}
	}
}

// One batch of outcomes with a step's success and another's failure for
// good (its last attempt) tells every child what it means: the success's
// child is released, the failure's children are cancelled (After), run
// anyway (AfterAnyway), or cancelled though their other parent succeeded,
// and a grouped step's success moves its group on too. The successes are
// queued by the batch itself and the failure by its trigger; both are told
// together, and no note is left.
func TestWorkflowBatchOfSuccessesAndAFailureTellsEveryChild(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("mixed")
	ok := wf.Add(req("x"))
	grouped := wf.Add(req("x", runtime.WithGroup("g")))
	bad := wf.Add(req("x", runtime.WithMaxAttempts(1)))
	released := wf.Add(req("x"), runtime.After(ok))
	afterGroup := wf.Add(req("x"), runtime.After(grouped))
	cancelled := wf.Add(req("x"), runtime.After(bad))
	anyway := wf.Add(req("x"), runtime.AfterAnyway(bad))
	both := wf.Add(req("x"), runtime.After(ok), runtime.After(bad))
	enqueueIdle(t, b, wf)
	tx := beginTx(t, b)
	g := gen.New(tx)
	claimed, err := g.ClaimJobs(ctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: 10, WorkerID: 1})
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claim: %d jobs, %v", len(claimed), err)
	}
	p := gen.SettleJobsParams{Queue: runtime.DefaultQueue}
	for i, c := range claimed {
		addSuccess(&p, c.ID, c.Attempts, 0)
		if c.ID == int64(bad.JobID()) {
			p.Errors[i] = json.RawMessage(fmt.Sprintf(`{"attempt": %d, "error": "boom"}`, c.Attempts))
			p.RetryInUs[i] = -1
		}
	}
	if r, err := g.SettleJobs(ctx, p); err != nil || r.Recorded != 3 {
		t.Fatalf("settle: %+v, %v", r, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[runtime.Step]testdb.PgtaskJobStatus{
		ok: testdb.PgtaskJobStatusSucceeded, grouped: testdb.PgtaskJobStatusSucceeded, bad: testdb.PgtaskJobStatusFailed,
		released: testdb.PgtaskJobStatusQueued, afterGroup: testdb.PgtaskJobStatusQueued,
		cancelled: testdb.PgtaskJobStatusCancelled, anyway: testdb.PgtaskJobStatusQueued, both: testdb.PgtaskJobStatusCancelled,
	}
	for s, st := range want {
		if j := b.job(t, s.JobID()); j.Status != st {
			t.Errorf("step %d is %s, want %s", s.JobID(), j.Status, st)
		}
	}
	if n, err := b.q.WorkflowNotesLeft(ctx); err != nil || n != 0 {
		t.Fatalf("workflow notes left: %d, %v", n, err)
	}
}
