package runtime

import (
	"context"
	"log/slog"
	"time"

	"github.com/pgtask/pgtask/gen"
)

// Retention is how long finished jobs are kept, by status, before the
// leader deletes them. A zero field takes its default; KeepForever (or any
// negative value) keeps such jobs. Ended batches (see EnqueueBatch) are
// kept as long as the longest of the three, and forever if any is
// KeepForever.
type Retention struct {
	Succeeded time.Duration // default 24 hours
	Failed    time.Duration // default 7 days
	Cancelled time.Duration // default 7 days
	// Interval is how often the leader deletes what is due. Default 1
	// minute.
	Interval time.Duration
}

// KeepForever, as a Retention age, keeps finished jobs of that status.
const KeepForever time.Duration = -1

func (r Retention) withDefaults() Retention {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&r.Succeeded, 24*time.Hour)
	def(&r.Failed, 7*24*time.Hour)
	def(&r.Cancelled, 7*24*time.Hour)
	if r.Interval <= 0 {
		r.Interval = time.Minute
	}
	return r
}

// retentionBatch bounds the jobs of a status one retention step deletes.
const retentionBatch = 5000

// retainer deletes finished jobs past their age (cfg), while this worker
// leads, every cfg.Interval. A step deletes one batch of each status, so
// that rescues and promotions never wait long for it; while a status has
// more to delete, the next step goes on at once.
type retainer struct {
	q      *gen.Queries
	log    *slog.Logger
	cfg    Retention
	batch  int32
	leader leaderStatus
	// at is when the next round is due, and backlog whether the last step
	// left jobs to delete.
	at      time.Time
	backlog bool
}

func (r *retainer) step(ctx context.Context) {
	if !r.leader.isLeader() || (!r.backlog && time.Now().Before(r.at)) {
		return
	}
	r.backlog = r.deleteBatch(ctx)
	if !r.backlog {
		r.at = time.Now().Add(r.cfg.Interval)
	}
}

// deleteBatch deletes one batch of each status's finished jobs past their
// age, and reports whether any status has more to delete.
func (r *retainer) deleteBatch(ctx context.Context) (more bool) {
	for _, s := range []struct {
		status gen.PgtaskJobStatus
		age    time.Duration
	}{
		{gen.PgtaskJobStatusSucceeded, r.cfg.Succeeded},
		{gen.PgtaskJobStatusFailed, r.cfg.Failed},
		{gen.PgtaskJobStatusCancelled, r.cfg.Cancelled},
	} {
		if s.age < 0 {
			continue
		}
		bctx, cancel := context.WithTimeout(ctx, bookkeeping)
		n, err := r.q.DeleteFinishedJobs(bctx, gen.DeleteFinishedJobsParams{
			Status: s.status, OlderThanMs: s.age.Milliseconds(), Max: r.batch,
		})
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("pgtask: retention failed; will retry", "status", s.status, "error", err)
			}
			return false
		}
		if n > 0 {
			r.log.Debug("pgtask: retention deleted finished jobs", "status", s.status, "older_than", s.age, "jobs", n)
		}
		more = more || n == r.batch
	}
	// Ended batches are kept as long as the longest-kept of their jobs.
	age := max(r.cfg.Succeeded, r.cfg.Failed, r.cfg.Cancelled)
	bctx, cancel := context.WithTimeout(ctx, bookkeeping)
	defer cancel()
	if min(r.cfg.Succeeded, r.cfg.Failed, r.cfg.Cancelled) >= 0 {
		n, err := r.q.DeleteFinishedBatches(bctx, gen.DeleteFinishedBatchesParams{OlderThanMs: age.Milliseconds(), Max: r.batch})
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("pgtask: retention of batches failed; will retry", "error", err)
			}
			return false
		}
		more = more || n == r.batch
	}
	// So are workflows, whose bookkeeping goes once none of their jobs is
	// left, whatever status is kept forever: a job kept is a job left.
	n, err := r.q.DeleteFinishedWorkflows(bctx, gen.DeleteFinishedWorkflowsParams{OlderThanMs: age.Milliseconds(), Max: r.batch})
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("pgtask: retention of workflows failed; will retry", "error", err)
		}
		return false
	}
	return more || n == r.batch
}
