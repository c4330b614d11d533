package runtime

import (
	"context"
	"math"
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
// duties (retention, periodic jobs). Every worker stands for election every
// electEveryTicks maintenance rounds; a leader's term lasts leaderTerm
// unless renewed, and ends at once when its process dies (see
// pgtask.elect) or it stops (it resigns).
const (
	leaderDuty      = "leader"
	leaderTerm      = 10 * time.Second
	retentionBatch  = 5000
	electEveryTicks = 4 // maintenance intervals
)

// IsLeader reports whether this worker is the one performing the
// database's cluster-wide duties now: it was elected, and its term, as
// counted from before it asked, has not run out.
func (w *Worker) IsLeader() bool {
	until := w.leaderUntil.Load()
	return until != nil && time.Now().Before(*until)
}

// term is how long a leader's term lasts: leaderTerm, or three election
// periods if longer, so that a leader renews its term well before it ends.
func (w *Worker) term() time.Duration {
	return min(max(leaderTerm, 3*electEveryTicks*w.cfg.MaintenanceInterval), maxIdleInTransaction)
}

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

// step stands for election every electEveryTicks maintenance rounds,
// enqueues the periodic jobs' due ticks then, and deletes what retention
// says while elected. Every worker records its kinds again now and then.
func (l *leadership) step(ctx context.Context) {
	w := l.w
	if l.ticks%electEveryTicks == 0 {
		// The term is counted from before the request, and less a margin,
		// so that this worker stops counting itself leader before the
		// database lets another take over.
		asked := time.Now()
		elected, err := w.elect(ctx, l.q)
		if err != nil && ctx.Err() == nil {
			w.log.Warn("pgtask: leader election failed; will retry", "error", err)
		}
		if elected {
			until := asked.Add(w.term() * 9 / 10)
			w.leaderUntil.Store(&until)
		} else {
			w.leaderUntil.Store(nil)
		}
		if was := w.leader.Swap(elected); was != elected {
			if elected {
				w.log.Info("pgtask: this worker is now the leader: it runs retention and periodic jobs", "worker", w.id)
			} else {
				w.log.Info("pgtask: this worker is no longer the leader", "worker", w.id)
			}
		}
		if elected {
			w.schedulePeriodic(ctx)
		}
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

// resign gives up the leadership when the worker stops, so that another
// takes it at once.
func (l *leadership) resign(ctx context.Context) {
	l.w.leaderUntil.Store(nil)
	if !l.w.leader.Swap(false) {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := l.q.Resign(rctx, gen.ResignParams{Duty: leaderDuty, WorkerID: l.w.id}); err != nil {
		l.w.log.Warn("pgtask: could not resign as leader; another worker takes over when the term ends", "error", err)
	}
}

func (w *Worker) elect(ctx context.Context, q *gen.Queries) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, bookkeeping)
	defer cancel()
	return q.Elect(ctx, gen.ElectParams{Duty: leaderDuty, WorkerID: w.id, TermMs: int32(min(w.term().Milliseconds(), math.MaxInt32))})
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
