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

// retentionBatch bounds the jobs of a status one retention step deletes.
const retentionBatch = 5000

// leadership is the leader's side of the maintenance loop, which runs it on
// the same connection between its own rounds: a worker uses one connection
// beside its running jobs.
type leadership struct {
	w     *Worker
	q     *gen.Queries
	ticks int
	// retention: when the next round is due, and whether the last one left
	// jobs to delete (it deletes a batch per status per maintenance round,
	// so that rescues and promotions never wait long for it).
	retainAt time.Time
	backlog  bool
	// kindsAt is when the worker records its kinds again: Run recorded
	// them, but a worker that started while all of this one's sessions
	// were gone (a database restart) deleted them as a dead worker's.
	kindsAt time.Time
}

// step enqueues the periodic jobs' due ticks every electEveryTicks
// rounds while this worker leads, and deletes what retention says while it
// leads. Every worker records its kinds again now and then.
func (l *leadership) step(ctx context.Context) {
	w := l.w
	if l.ticks%electEveryTicks == 0 && w.maint.leader.isLeader() {
		w.schedulePeriodic(ctx)
	}
	l.ticks++
	if now := time.Now(); l.kindsAt.IsZero() {
		l.kindsAt = now.Add(w.kindsEvery)
	} else if !now.Before(l.kindsAt) {
		w.recordKinds(ctx, l.q)
		l.kindsAt = now.Add(w.kindsEvery)
	}
	if w.IsLeader() && (l.backlog || !time.Now().Before(l.retainAt)) {
		l.backlog = w.retainBatch(ctx, l.q)
		if !l.backlog {
			l.retainAt = time.Now().Add(w.cfg.Retention.Interval)
		}
	}
}

// retainBatch deletes one batch of each status's finished jobs past their
// age, and reports whether any status has more to delete.
func (w *Worker) retainBatch(ctx context.Context, q *gen.Queries) (more bool) {
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
		bctx, cancel := context.WithTimeout(ctx, bookkeeping)
		n, err := q.DeleteFinishedJobs(bctx, gen.DeleteFinishedJobsParams{
			Status: s.status, OlderThanMs: s.age.Milliseconds(), Max: retentionBatch,
		})
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("pgtask: retention failed; will retry", "status", s.status, "error", err)
			}
			return false
		}
		if n > 0 {
			w.log.Debug("pgtask: retention deleted finished jobs", "status", s.status, "older_than", s.age, "jobs", n)
		}
		more = more || n == retentionBatch
	}
	return more
}
