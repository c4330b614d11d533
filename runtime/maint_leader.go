package runtime

import (
	"context"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/pgtask/pgtask/gen"
)

// The leader among the workers of a database performs its cluster-wide
// duties (retention, periodic jobs). Every worker stands for election every
// electEveryTicks maintenance rounds; a leader's term lasts leaderTerm
// unless renewed, and ends at once when its process dies (see
// pgtask.elect) or it stops (it resigns).
const (
	leaderDuty      = "leader"
	leaderTerm      = 10 * time.Second
	electEveryTicks = 4 // maintenance intervals
)

// IsLeader reports whether this worker is the one performing the
// database's cluster-wide duties now: it was elected, and its term, as
// counted from before it asked, has not run out.
func (w *Worker) IsLeader() bool { return w.maint.leader.isLeader() }

// term is how long a leader's term lasts: leaderTerm, or three election
// periods if longer, so that a leader renews its term well before it ends.
func (w *Worker) term() time.Duration {
	return min(max(leaderTerm, 3*electEveryTicks*w.cfg.MaintenanceInterval), maxIdleInTransaction)
}

// leader stands for election every `every` maintenance rounds, on the
// maintenance loop's connection, and tells the leader-only services
// (retention, periodic jobs) whether this worker leads now (isLeader).
type leader struct {
	q        *gen.Queries
	log      *slog.Logger
	workerID int32
	term     time.Duration
	every    int
	ticks    int
	// elected: the worker was elected at its last election, and until
	// when it stops counting itself leader.
	elected atomic.Bool
	until   atomic.Pointer[time.Time]
}

// isLeader reports whether this worker was elected and its term, as
// counted from before it asked, has not run out.
func (l *leader) isLeader() bool {
	until := l.until.Load()
	return until != nil && time.Now().Before(*until)
}

// step stands for election every l.every rounds.
func (l *leader) step(ctx context.Context) {
	defer func() { l.ticks++ }()
	if l.ticks%l.every != 0 {
		return
	}
	// The term is counted from before the request, and less a margin, so
	// that this worker stops counting itself leader before the database
	// lets another take over.
	asked := time.Now()
	elected, err := l.elect(ctx)
	if err != nil && ctx.Err() == nil {
		l.log.Warn("pgtask: leader election failed; will retry", "error", err)
	}
	if elected {
		until := asked.Add(l.term * 9 / 10)
		l.until.Store(&until)
	} else {
		l.until.Store(nil)
	}
	if was := l.elected.Swap(elected); was != elected {
		if elected {
			l.log.Info("pgtask: this worker is now the leader: it runs retention and periodic jobs", "worker", l.workerID)
		} else {
			l.log.Info("pgtask: this worker is no longer the leader", "worker", l.workerID)
		}
	}
}

func (l *leader) elect(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, bookkeeping)
	defer cancel()
	return l.q.Elect(ctx, gen.ElectParams{Duty: leaderDuty, WorkerID: l.workerID, TermMs: int32(min(l.term.Milliseconds(), math.MaxInt32))})
}

// resign gives up the leadership when the worker stops, so that another
// takes it at once.
func (l *leader) resign(ctx context.Context) {
	l.until.Store(nil)
	if !l.elected.Swap(false) {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := l.q.Resign(rctx, gen.ResignParams{Duty: leaderDuty, WorkerID: l.workerID}); err != nil {
		l.log.Warn("pgtask: could not resign as leader; another worker takes over when the term ends", "error", err)
	}
}
