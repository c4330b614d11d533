package runtime

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/robfig/cron/v3"

	"github.com/pgtask/pgtask/gen"
)

// PeriodicJob enqueues a job on a schedule. The leader among the workers
// (see Worker.IsLeader) enqueues each tick's job; the database makes sure a
// tick gets one job, however many workers try: the tick is recorded in the
// transaction that enqueues its job.
type PeriodicJob struct {
	// Name identifies the job's ticks in the database: keep it when the
	// schedule changes, and never give two periodic jobs the same one.
	Name string
	// Schedule is a cron expression: five fields ("*/5 * * * *",
	// "0 3 * * MON-FRI"), a descriptor ("@hourly", "@daily"), or an
	// interval ("@every 90s", ticking at whole multiples of it from a fixed
	// instant, the same for every worker; ticks are noticed within a second,
	// so a finer one is not kept). A "CRON_TZ=Europe/Berlin " prefix sets its time zone. Around a
	// change of clocks a time of day the change skips has no tick, and one
	// it repeats has two.
	Schedule string
	// Location is the time zone the schedule is read in, unless it names
	// one itself. Default UTC.
	Location *time.Location
	// Missed says what happens to ticks that passed with no leader to
	// enqueue them (every worker was down, or the leader hung). Default
	// MissedRunOnce.
	Missed MissedTicks
	// Enqueue enqueues the tick's job in tx, the transaction that records
	// the tick, with a generated Enqueue function or runtime.Enqueue. An
	// error rolls the tick back; it is tried again a second later. A panic
	// skips the tick: it is recovered, logged and counted (see
	// Worker.PeriodicPanics), and what Enqueue wrote is rolled back.
	Enqueue func(ctx context.Context, tx DB, tick time.Time) error
}

// MissedTicks says what a periodic job does about ticks it missed: those
// no worker enqueued within periodicGrace of their time.
type MissedTicks int

const (
	// MissedRunOnce enqueues one job, for the latest missed tick.
	MissedRunOnce MissedTicks = iota
	// MissedSkip enqueues none for missed ticks; the next tick runs.
	MissedSkip
	// MissedRunAll enqueues a job for each missed tick, oldest first, up to
	// maxMissedTicks at a time.
	MissedRunAll
)

const (
	// periodicGrace is how late a tick may be enqueued and still count as
	// on time.
	periodicGrace = 30 * time.Second
	// maxMissedTicks bounds the ticks MissedRunAll catches up on in one
	// round; the rest follow in the next rounds.
	maxMissedTicks = 1000
	// maxPeriodicNameBytes bounds a periodic job's name.
	maxPeriodicNameBytes = 128
)

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// periodic is a registered periodic job.
type periodic struct {
	PeriodicJob
	schedule cron.Schedule
}

// RegisterPeriodic adds a periodic job. Like Register, it must be called
// before Run. Every worker may register the same periodic jobs (they are
// usually built by the same code); only the leader enqueues them.
func (w *Worker) RegisterPeriodic(p PeriodicJob) error {
	if p.Name == "" {
		return errors.New("register periodic job: the name is empty")
	}
	if err := checkName("periodic job name", p.Name, maxPeriodicNameBytes); err != nil {
		return fmt.Errorf("register periodic job: %w", err)
	}
	if p.Enqueue == nil {
		return fmt.Errorf("register periodic job %s: Enqueue is nil", p.Name)
	}
	if p.Missed < MissedRunOnce || p.Missed > MissedRunAll {
		return fmt.Errorf("register periodic job %s: unknown Missed policy %d", p.Name, p.Missed)
	}
	schedule, err := cronParser.Parse(p.Schedule)
	if err != nil {
		return fmt.Errorf("register periodic job %s: schedule %q: %w", p.Name, p.Schedule, err)
	}
	if c, ok := schedule.(cron.ConstantDelaySchedule); ok {
		schedule = every{c.Delay}
	}
	if p.Location == nil {
		p.Location = time.UTC
	}
	if first := schedule.Next(time.Now().In(p.Location)); first.IsZero() {
		return fmt.Errorf("register periodic job %s: schedule %q never fires", p.Name, p.Schedule)
	}
	if w.started.Load() {
		return fmt.Errorf("register periodic job %s: the worker is running already", p.Name)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, q := range w.periodic {
		if q.Name == p.Name {
			return fmt.Errorf("register periodic job %s: registered twice", p.Name)
		}
	}
	w.periodic = append(w.periodic, &periodic{PeriodicJob: p, schedule: schedule})
	return nil
}

// PeriodicPanics is how many ticks of periodic jobs this worker skipped
// because their Enqueue panicked (each is logged as an error).
func (w *Worker) PeriodicPanics() int64 { return w.periodicPanics.Load() }

// schedulePeriodic enqueues the jobs of the periodic jobs' due ticks. For a
// job that never ran, the first time this worker scheduled stands in for
// its last tick: its ticks before then were not missed, it did not exist.
func (w *Worker) schedulePeriodic(ctx context.Context) {
	w.mu.RLock()
	jobs := w.periodic
	w.mu.RUnlock()
	if len(jobs) == 0 {
		return
	}
	names := make([]string, len(jobs))
	for i, p := range jobs {
		names[i] = p.Name
	}
	qctx, cancel := context.WithTimeout(ctx, bookkeeping)
	rows, err := gen.New(w.pool).LastPeriodicTicks(qctx, names)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("pgtask: could not read the periodic jobs' ticks; will retry", "error", err)
		}
		return
	}
	w.mu.Lock()
	if w.periodicSince.IsZero() {
		w.periodicSince = rows[0].Now
	}
	since := w.periodicSince
	w.mu.Unlock()
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
			if err := w.enqueueTick(ctx, p, tick, last); err != nil {
				if ctx.Err() == nil {
					w.log.Warn("pgtask: could not enqueue a periodic job; will retry", "periodic", p.Name, "tick", tick, "error", err)
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

// every is an @every schedule whose ticks are whole multiples of its
// interval since Go's zero time, so that every worker finds the same ones
// whenever it started.
type every struct{ d time.Duration }

func (e every) Next(t time.Time) time.Time {
	return t.Truncate(e.d).Add(e.d).In(t.Location())
}

// enqueueTick records tick and enqueues its job in one transaction; a tick
// someone else took is left alone. Ticks before last are forgotten.
func (w *Worker) enqueueTick(ctx context.Context, p *periodic, tick, last time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, bookkeeping)
	defer cancel()
	tx, err := w.pool.Begin(ctx)
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
	if err := w.enqueueOrRecover(ctx, p, sp, tick); err != nil {
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
func (w *Worker) enqueueOrRecover(ctx context.Context, p *periodic, sp pgx.Tx, tick time.Time) (err error) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		w.periodicPanics.Add(1)
		w.log.Error("pgtask: a periodic job's Enqueue panicked; its tick is skipped",
			"periodic", p.Name, "tick", tick, "panic", fmt.Sprintf("%T", v), "stack", string(debug.Stack()))
		err = sp.Rollback(ctx)
	}()
	if err := p.Enqueue(ctx, sp, tick); err != nil {
		return err
	}
	return sp.Commit(ctx)
}
