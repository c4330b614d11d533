package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/pgtask/pgtask/gen"
)

// Drain works, in the calling goroutine, every job of the worker's queues
// that can run now, a batch at a time, until none is left, and returns how
// many attempts it ran. It is for tests: enqueue, Drain, then check what the
// handlers did, with no goroutine to wait for. Outcomes are recorded as Run
// records them; retries wait out their backoff and are not run, and delayed
// jobs run only once due. Every queue is worked as the held-transaction
// mode works it (job.Tx() is the job's transaction). Drain may be called
// again and again, but not on a worker that is running or has run.
func (w *Worker) Drain(ctx context.Context) (int, error) {
	if !w.started.CompareAndSwap(false, true) {
		return 0, errors.New("drain: the worker is running, or has run")
	}
	defer w.started.Store(false)
	if err := w.settleModes(); err != nil {
		return 0, fmt.Errorf("drain: %w", err)
	}
	w.idleTimeout = w.longestIdle()
	q := gen.New(w.pool)
	total := 0
	for {
		// Due delayed jobs and retries join their queues; groups whose head
		// finished while an enqueue was in flight move on.
		if err := w.maintainOnce(ctx, q); err != nil {
			return total, fmt.Errorf("drain: %w", err)
		}
		ran := 0
		for _, name := range slices.Sorted(maps.Keys(w.queues)) {
			r := &runner{w: w, q: w.queues[name]}
			n, err := r.work(ctx, ctx)
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
// (what a failed attempt left, then its retry): the same rules apply.
func (w *Worker) WorkOne(ctx context.Context) (*JobInfo, error) {
	if !w.started.CompareAndSwap(false, true) {
		return nil, errors.New("work one: the worker is running, or has run")
	}
	defer w.started.Store(false)
	if err := w.settleModes(); err != nil {
		return nil, fmt.Errorf("work one: %w", err)
	}
	w.idleTimeout = w.longestIdle()
	if err := w.maintainOnce(ctx, gen.New(w.pool)); err != nil {
		return nil, fmt.Errorf("work one: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(w.queues)) {
		r := &runner{w: w, q: w.queues[name], one: true}
		if _, err := r.work(ctx, ctx); err != nil {
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
