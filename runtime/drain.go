package runtime

import (
	"context"
	"fmt"
	"maps"
	"slices"
)

// Drain works, in the calling goroutine, every job of the worker's queues
// that can run now and whose kind it has a handler for (jobs of other kinds
// are left queued, as Run leaves them), a batch at a time, until none is
// left, and returns how
// many attempts it ran. It is for tests: enqueue, Drain, then check what the
// handlers did, with no goroutine to wait for. Outcomes are recorded as Run
// records them; retries wait out their backoff and are not run, and delayed
// jobs run only once due. Every queue is worked as held mode works it
// (job.Tx() is the transaction that holds the job's lock); a worker with a
// lease-mode queue is refused with an error naming it. Drain may be called
// again and again, but not on a worker that is running or has run.
func (w *Worker) Drain(ctx context.Context) (int, error) {
	done, err := w.workInCaller("drain")
	if err != nil {
		return 0, err
	}
	defer done()
	total := 0
	for {
		// Due delayed jobs and retries join their queues; groups whose head
		// finished while an enqueue was in flight move on.
		if err := w.maint.round(ctx); err != nil {
			return total, fmt.Errorf("drain: %w", err)
		}
		// No listener tells this worker of heads made runnable behind its
		// claims' cursors: each round looks back from the start.
		w.lookBehindAll()
		ran := 0
		for _, name := range slices.Sorted(maps.Keys(w.queues)) {
			r := &runner{w: w, q: w.queues[name], ctx: ctx, hard: ctx}
			n, err := r.work()
			ran += n
			if err != nil {
				return total + ran, fmt.Errorf("drain: queue %s: %w", name, err)
			}
		}
		total += ran
		if ran == 0 {
			return total, nil
		}
	}
}

// WorkOne works, in the calling goroutine, one attempt of the next job of
// the worker's queues that can run now (queues in name order, each as Run
// picks its jobs), and returns the job as its attempt left it; nil when no job
// could run. It is Drain one job at a time, for tests that check each step
// (what a failed attempt left, then its retry): the same rules apply, and
// a worker with a lease-mode queue is refused likewise.
func (w *Worker) WorkOne(ctx context.Context) (*JobInfo, error) {
	done, err := w.workInCaller("work one")
	if err != nil {
		return nil, err
	}
	defer done()
	if err := w.maint.round(ctx); err != nil {
		return nil, fmt.Errorf("work one: %w", err)
	}
	w.lookBehindAll()
	for _, name := range slices.Sorted(maps.Keys(w.queues)) {
		r := &runner{w: w, q: w.queues[name], ctx: ctx, hard: ctx, one: true}
		if _, err := r.work(); err != nil {
			return nil, fmt.Errorf("work one: queue %s: %w", name, err)
		}
		if len(r.ran) > 0 {
			info, err := GetJob(ctx, w.pool, JobID(r.ran[0]))
			if err != nil {
				return nil, fmt.Errorf("work one: %w", err)
			}
			return info, nil
		}
	}
	return nil, nil
}

// workInCaller readies a worker that is not running to work jobs in the
// calling goroutine (Drain, WorkOne), and returns the function that ends
// that; what names the caller in errors.
func (w *Worker) workInCaller(what string) (done func(), err error) {
	if !w.started.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("%s: the worker is running, or has run", what)
	}
	if err := w.settleModes(); err != nil {
		w.started.Store(false)
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	// Jobs are worked here as held mode works them: in a transaction that
	// holds their locks. A lease-mode queue's handlers are written for a
	// lease (Job.Extend, no connection held), so its jobs are not run so.
	for _, name := range slices.Sorted(maps.Keys(w.queues)) {
		if w.queues[name].cfg.Mode == ModeLease {
			w.started.Store(false)
			return nil, fmt.Errorf("%s: queue %s runs in lease mode, and Drain and WorkOne work held-mode queues only: "+
				"test lease-mode jobs with Run, or serve the queue in held mode in the test's Config", what, name)
		}
	}
	w.divideConnections()
	w.idleTimeout = w.longestIdle()
	return func() { w.started.Store(false) }, nil
}
