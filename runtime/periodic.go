package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
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
func (w *Worker) PeriodicPanics() int64 { return w.maint.periodic.panics.Load() }

// every is an @every schedule whose ticks are whole multiples of its
// interval since Go's zero time, so that every worker finds the same ones
// whenever it started.
type every struct{ d time.Duration }

func (e every) Next(t time.Time) time.Time {
	return t.Truncate(e.d).Add(e.d).In(t.Location())
}
