package runtime

import (
	"context"
	"time"

	"github.com/pgtask/pgtask/gen"
)

// Retention is how long finished jobs are kept, by status, before the
// leader deletes them. A zero field takes its default; KeepForever (or any
// negative value) keeps such jobs.
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

// The leader among the workers of a database performs its cluster-wide
// duties (retention). Every worker stands for election every electEvery; a
// leader's term lasts leaderTerm unless renewed, and ends at once when its
// process dies (see pgtask.elect) or it stops (it resigns).
const (
	leaderDuty      = "leader"
	leaderTerm      = 10 * time.Second
	retentionBatch  = 5000
	electEveryTicks = 4 // maintenance intervals
)

// IsLeader reports whether this worker is the one performing the
// database's cluster-wide duties now.
func (w *Worker) IsLeader() bool { return w.leader.Load() }

// lead stands for election until ctx ends, and performs the duties while
// elected.
func (w *Worker) lead(ctx context.Context) {
	t := time.NewTicker(w.cfg.MaintenanceInterval * electEveryTicks)
	defer t.Stop()
	q := gen.New(w.pool)
	var lastRetention time.Time
	for {
		elected, err := w.elect(ctx, q)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			w.log.Warn("pgtask: leader election failed; will retry", "error", err)
		}
		if was := w.leader.Swap(elected); was != elected {
			if elected {
				w.log.Info("pgtask: this worker is now the leader: it runs retention", "worker", w.id)
			} else {
				w.log.Info("pgtask: this worker is no longer the leader", "worker", w.id)
			}
		}
		if elected && time.Since(lastRetention) >= w.cfg.Retention.Interval {
			lastRetention = time.Now()
			w.retain(ctx, q)
		}
		select {
		case <-ctx.Done():
		case <-t.C:
			continue
		}
		break
	}
	if w.leader.Swap(false) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := q.Resign(rctx, gen.ResignParams{Duty: leaderDuty, WorkerID: w.id}); err != nil {
			w.log.Warn("pgtask: could not resign as leader; another worker takes over when the term ends", "error", err)
		}
	}
}

func (w *Worker) elect(ctx context.Context, q *gen.Queries) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, bookkeeping)
	defer cancel()
	return q.Elect(ctx, gen.ElectParams{Duty: leaderDuty, WorkerID: w.id, TermMs: int32(leaderTerm.Milliseconds())})
}

// retain deletes the finished jobs past their status's age, in batches,
// until none is left or ctx ends.
func (w *Worker) retain(ctx context.Context, q *gen.Queries) {
	r := w.cfg.Retention
	for _, s := range []struct {
		status gen.PgtaskJobStatus
		age    time.Duration
	}{
		{gen.PgtaskJobStatusSucceeded, r.Succeeded},
		{gen.PgtaskJobStatusFailed, r.Failed},
		{gen.PgtaskJobStatusCancelled, r.Cancelled},
	} {
		if s.age < 0 {
			continue
		}
		total := 0
		for ctx.Err() == nil {
			bctx, cancel := context.WithTimeout(ctx, bookkeeping)
			n, err := q.DeleteFinishedJobs(bctx, gen.DeleteFinishedJobsParams{
				Status: s.status, OlderThanMs: s.age.Milliseconds(), Max: retentionBatch,
			})
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					w.log.Warn("pgtask: retention failed; will retry", "status", s.status, "error", err)
				}
				return
			}
			total += int(n)
			if n < retentionBatch {
				break
			}
		}
		if total > 0 {
			w.log.Info("pgtask: retention deleted finished jobs", "status", s.status, "older_than", s.age, "jobs", total)
		}
	}
}
