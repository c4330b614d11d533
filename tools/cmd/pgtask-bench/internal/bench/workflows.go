package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	pgtask "github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-bench/internal/benchdb"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-bench/internal/benchtasks"
)

// measureWorkflows prices workflows at the default Config, in each of
// o.WorkflowModes:
//   - a fan-out of o.WorkflowFan steps and one fan-in step after all of
//     them, drained beside a plain drain of as many jobs run just before
//     it: what the steps' bookkeeping costs, and the fan-in's finishers,
//     which meet on one row;
//   - a chain of o.WorkflowChain steps: from a step's success recorded
//     (its finished_at, in the transaction that commits it) to the next
//     step's handler starting.
func (b *bench) measureWorkflows(ctx context.Context) error {
	if err := b.measureWorkflowEnqueue(ctx); err != nil {
		return err
	}
	for _, m := range strings.Split(b.o.WorkflowModes, ",") {
		mode := pgtask.Mode(strings.TrimSpace(m))
		if mode == "" {
			continue
		}
		if mode != pgtask.ModeHeld && mode != pgtask.ModeLease {
			return fmt.Errorf("-workflow-modes: %q is not held or lease", m)
		}
		n := b.o.WorkflowFan + 1
		qc := pgtask.QueueConfig{Mode: mode}
		base, err := b.drainWith(ctx, false, drainSpec{label: fmt.Sprintf("workflows (%s): plain drain", mode), n: n, qc: qc},
			func(ctx context.Context, pool *pgxpool.Pool) error { return enqueueNoops(ctx, pool, "bench", n, 0) })
		if err != nil {
			return err
		}
		label := fmt.Sprintf("workflows (%s): fan-out of %d steps, one fan-in step", mode, b.o.WorkflowFan)
		fan, err := b.drainWith(ctx, false, drainSpec{label: label, n: n, qc: qc},
			func(ctx context.Context, pool *pgxpool.Pool) error { return enqueueFan(ctx, pool, b.o.WorkflowFan) })
		if err != nil {
			return err
		}
		b.addVersus(label, n, rate(n, fan.elapsed), rate(n, base.elapsed), 0.5, "a plain drain of as many jobs")
		if err := b.measureChain(ctx, mode); err != nil {
			return err
		}
	}
	return nil
}

// enqueueFan enqueues a workflow of n no-op steps of queue "bench" and one
// step after all of them.
func enqueueFan(ctx context.Context, pool *pgxpool.Pool, n int) error {
	wf := pgtask.NewWorkflow("fan")
	deps := make([]pgtask.StepOption, 0, n)
	for i := range n {
		deps = append(deps, pgtask.After(benchtasks.AddNoop(wf, benchtasks.Noop{N: i})))
	}
	benchtasks.AddNoop(wf, benchtasks.Noop{N: n}, deps...)
	if _, err := wf.Enqueue(ctx, pool); err != nil {
		return err
	}
	return benchdb.New(pool).AnalyzeJobs(ctx)
}

// measureChain works a chain of o.WorkflowChain no-op steps with one
// worker at the default Config in mode, and times each step's start from
// its parent's success.
func (b *bench) measureChain(ctx context.Context, mode pgtask.Mode) error {
	n := b.o.WorkflowChain
	label := fmt.Sprintf("workflows (%s): chain, parent's success to the next step's start", mode)
	pool, url, cleanup, err := b.database(ctx, b.o.Conns)
	if err != nil {
		return err
	}
	defer cleanup()
	wf := pgtask.NewWorkflow("chain")
	prev := benchtasks.AddNoop(wf, benchtasks.Noop{N: 0})
	for i := 1; i < n; i++ {
		prev = benchtasks.AddNoop(wf, benchtasks.Noop{N: i}, pgtask.After(prev))
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	w, err := pgtask.NewWorker(ctx, cfg, pgtask.Config{
		Queues: map[string]pgtask.QueueConfig{"bench": {Mode: mode}},
		Logger: b.quiet,
	})
	if err != nil {
		return err
	}
	defer w.Close()
	var mu sync.Mutex
	starts := map[pgtask.JobID]time.Time{}
	if err := benchtasks.HandleNoop(w, func(_ context.Context, job *pgtask.Job, _ benchtasks.Noop) error {
		now := time.Now()
		mu.Lock()
		starts[job.ID] = now
		mu.Unlock()
		return nil
	}); err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Go(func() { _ = w.Run(runCtx) })
	b.say("%s: enqueueing %d steps", label, n)
	if _, err := wf.Enqueue(ctx, pool); err != nil {
		return err
	}
	if err := b.waitFinished(ctx, pool, "bench", label, "steps", n, 100*time.Millisecond); err != nil {
		return err
	}
	b.done()
	finished, err := benchdb.New(pool).FinishTimes(ctx, "bench")
	if err != nil {
		return err
	}
	if len(finished) != n {
		return fmt.Errorf("%s: %d steps finished, want %d", label, len(finished), n)
	}
	mu.Lock()
	defer mu.Unlock()
	lat := make([]time.Duration, 0, n-1)
	for i := 1; i < n; i++ {
		s, ok := starts[pgtask.JobID(finished[i].ID)]
		if !ok {
			return fmt.Errorf("%s: step %d has no start", label, finished[i].ID)
		}
		lat = append(lat, s.Sub(finished[i-1].FinishedAt))
	}
	slices.Sort(lat)
	p50, p99 := percentile(lat, 0.5), percentile(lat, 0.99)
	b.add(label, fmt.Sprintf("%d steps", n), fmt.Sprintf("p50 %s, p99 %s", ms(p50), ms(p99)), 0,
		"p50 <= 5ms", ok(p50 <= 5*time.Millisecond))
	return nil
}

// measureWorkflowEnqueue times enqueueing a workflow of o.WorkflowFan
// steps, one root and the rest after it (a fan-out), beside one EnqueueMany
// of as many jobs just before it, each into a database of its own: what
// making the steps a workflow costs an enqueue.
func (b *bench) measureWorkflowEnqueue(ctx context.Context) error {
	n := b.o.WorkflowFan
	label := fmt.Sprintf("workflows: enqueue of a fan-out of %d steps", n)
	timeIt := func(enqueue func(ctx context.Context, pool *pgxpool.Pool) error) (time.Duration, error) {
		pool, _, cleanup, err := b.database(ctx, b.o.Conns)
		if err != nil {
			return 0, err
		}
		defer cleanup()
		start := time.Now()
		if err := enqueue(ctx, pool); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	b.say("%s: EnqueueMany of %d jobs", label, n)
	many, err := timeIt(func(ctx context.Context, pool *pgxpool.Pool) error {
		ts := make([]benchtasks.Noop, n)
		for i := range ts {
			ts[i] = benchtasks.Noop{N: i}
		}
		_, err := benchtasks.EnqueueNoopMany(ctx, pool, ts, pgtask.WithQueue("bench"))
		return err
	})
	if err != nil {
		return err
	}
	b.say("%s: the workflow", label)
	fan, err := timeIt(func(ctx context.Context, pool *pgxpool.Pool) error {
		wf := pgtask.NewWorkflow("fan-out")
		root := benchtasks.AddNoop(wf, benchtasks.Noop{N: 0})
		for i := 1; i < n; i++ {
			benchtasks.AddNoop(wf, benchtasks.Noop{N: i}, pgtask.After(root))
		}
		_, err := wf.Enqueue(ctx, pool)
		return err
	})
	if err != nil {
		return err
	}
	b.done()
	b.addVersus(label, n, rate(n, fan), rate(n, many), 0.5, "EnqueueMany of as many jobs")

	// A cascade: the root's cancel cancels every other step, in the
	// operator's transaction.
	label = fmt.Sprintf("workflows: cancel of a fan-out's root, %d steps", n)
	b.say("%s", label)
	var cascade time.Duration
	pool, _, cleanup, err := b.database(ctx, b.o.Conns)
	if err != nil {
		return err
	}
	defer cleanup()
	wf := pgtask.NewWorkflow("fan-out")
	root := benchtasks.AddNoop(wf, benchtasks.Noop{N: 0})
	for i := 1; i < n; i++ {
		benchtasks.AddNoop(wf, benchtasks.Noop{N: i}, pgtask.After(root))
	}
	if _, err := wf.Enqueue(ctx, pool); err != nil {
		return err
	}
	start := time.Now()
	if _, err := pgtask.CancelJob(ctx, pool, root.JobID()); err != nil {
		return err
	}
	cascade = time.Since(start)
	b.done()
	b.addVersus(label, n, rate(n, cascade), rate(n, many), 0.5, "EnqueueMany of as many jobs")
	return nil
}
