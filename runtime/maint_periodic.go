package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/gen"
)

// periodicScheduler enqueues the jobs of the periodic jobs' due ticks
// (RegisterPeriodic) every `every` maintenance rounds, while this worker
// leads. The database makes sure a tick gets one job, however many workers
// try.
type periodicScheduler struct {
	pool   *pgxpool.Pool
	log    *slog.Logger
	leader leaderStatus
	every  int
	ticks  int
	// jobs are the registered periodic jobs.
	jobs func() []*periodic
	// since is when this worker first scheduled them.
	mu    sync.Mutex
	since time.Time
	// panics counts the ticks skipped because Enqueue panicked.
	panics atomic.Int64
}

func (s *periodicScheduler) step(ctx context.Context) {
	defer func() { s.ticks++ }()
	if s.ticks%s.every == 0 && s.leader.isLeader() {
		s.schedule(ctx)
	}
}

// schedule enqueues the jobs of the periodic jobs' due ticks. For a
// job that never ran, the first time this worker scheduled stands in for
// its last tick: its ticks before then were not missed, it did not exist.
func (s *periodicScheduler) schedule(ctx context.Context) {
	jobs := s.jobs()
	if len(jobs) == 0 {
		return
	}
	names := make([]string, len(jobs))
	for i, p := range jobs {
		names[i] = p.Name
	}
	qctx, cancel := context.WithTimeout(ctx, bookkeeping)
	rows, err := gen.New(s.pool).LastPeriodicTicks(qctx, names)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("pgtask: could not read the periodic jobs' ticks; will retry", "error", err)
		}
		return
	}
	s.mu.Lock()
	if s.since.IsZero() {
		s.since = rows[0].Now
	}
	since := s.since
	s.mu.Unlock()
	byName := make(map[string]gen.LastPeriodicTicksRow, len(rows))
	for _, r := range rows {
		byName[r.Name] = r
	}
	for _, p := range jobs {
		last, now := byName[p.Name].LastTick, byName[p.Name].Now
		after := last
		if last.Equal(time.Unix(0, 0)) {
			after = since
		}
		for _, tick := range p.due(after, now) {
			if err := s.enqueueTick(ctx, p, tick, last); err != nil {
				if ctx.Err() == nil {
					s.log.Warn("pgtask: could not enqueue a periodic job; will retry", "periodic", p.Name, "tick", tick, "error", err)
				}
				break
			}
		}
	}
}

// due returns the ticks after after and up to now to enqueue, oldest first,
// as the job's Missed policy says.
func (p *periodic) due(after, now time.Time) []time.Time {
	after = after.In(p.Location)
	if p.Missed != MissedRunAll {
		// Only the latest tick counts: find a recent start with a tick
		// between it and now, looking back twice as far each time, so that
		// a long outage costs no walk over every tick it missed.
		for back := time.Minute; ; back *= 2 {
			start := now.Add(-back).In(p.Location)
			if !start.After(after) {
				break
			}
			if t := p.schedule.Next(start); !t.IsZero() && !t.After(now) {
				after = start
				break
			}
		}
	}
	var ticks []time.Time
	for t := p.schedule.Next(after); !t.IsZero() && !t.After(now); t = p.schedule.Next(t) {
		ticks = append(ticks, t)
		if len(ticks) == maxMissedTicks {
			if p.Missed == MissedRunAll {
				break
			}
			ticks = ticks[len(ticks)-1:] // only the latest counts
		}
	}
	if len(ticks) == 0 || p.Missed == MissedRunAll {
		return ticks
	}
	latest := ticks[len(ticks)-1]
	if p.Missed == MissedSkip && now.Sub(latest) > periodicGrace {
		return nil
	}
	return []time.Time{latest}
}

// enqueueTick records tick and enqueues its job in one transaction; a tick
// someone else took is left alone. Ticks before last are forgotten.
func (s *periodicScheduler) enqueueTick(ctx context.Context, p *periodic, tick, last time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, bookkeeping)
	defer cancel()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	taken, err := gen.New(tx).TakePeriodicTick(ctx, gen.TakePeriodicTickParams{Name: p.Name, TickAt: tick, KeepAfter: last})
	if err != nil || !taken {
		return err
	}
	// Behind a savepoint, so that a panicking Enqueue's writes are undone
	// while its tick is kept: the tick is skipped.
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	if err := s.enqueueOrRecover(ctx, p, sp, tick); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// enqueueOrRecover runs p's Enqueue in sp, a savepoint of the tick's
// transaction, and releases it. A panic in Enqueue costs the tick, not the
// leader (whose maintenance loop would die with it, and then every worker's
// in turn as it took over): sp is rolled back, the panic logged and counted,
// and nil returned so that the tick is recorded without a job. The panic's
// value is not logged, as it may hold anything; its type and stack are.
func (s *periodicScheduler) enqueueOrRecover(ctx context.Context, p *periodic, sp pgx.Tx, tick time.Time) (err error) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		s.panics.Add(1)
		s.log.Error("pgtask: a periodic job's Enqueue panicked; its tick is skipped",
			"periodic", p.Name, "tick", tick, "panic", fmt.Sprintf("%T", v), "stack", string(debug.Stack()))
		err = sp.Rollback(ctx)
	}()
	if err := p.Enqueue(ctx, sp, tick); err != nil {
		return err
	}
	return sp.Commit(ctx)
}
