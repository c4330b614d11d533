package runtime

import (
	"slices"
	"testing"
	"time"
	_ "time/tzdata" // the zones, wherever the tests run

	"github.com/robfig/cron/v3"
)

func periodicOf(t *testing.T, schedule string, loc *time.Location, missed MissedTicks) *periodic {
	t.Helper()
	s, err := cronParser.Parse(schedule)
	if err != nil {
		t.Fatal(err)
	}
	return &periodic{PeriodicJob: PeriodicJob{Location: loc, Missed: missed}, schedule: s}
}

// A schedule is read in its time zone, across a change to summer time.
func TestPeriodicTicksFollowTheTimeZone(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	after := time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC)
	now := time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC)
	// 03:00 in Berlin: 02:00 UTC before 29 March 2026, 01:00 UTC from then.
	want := []time.Time{
		time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 30, 1, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 31, 1, 0, 0, 0, time.UTC),
	}
	for _, p := range []*periodic{
		periodicOf(t, "0 3 * * *", berlin, MissedRunAll),
		periodicOf(t, "CRON_TZ=Europe/Berlin 0 3 * * *", time.UTC, MissedRunAll),
	} {
		if got := p.due(after, now); !slices.EqualFunc(got, want, time.Time.Equal) {
			t.Errorf("%v: ticks %v, want %v", p.Location, got, want)
		}
	}
}

// After a long outage only the latest missed tick is looked for, however
// many there were, unless each is to run.
func TestPeriodicLongOutageCostsNoWalk(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 500e6, time.UTC)
	yearAgo := now.AddDate(-1, 0, 0)
	p := periodicOf(t, "@every 1s", time.UTC, MissedRunOnce)
	began := time.Now()
	got := p.due(yearAgo, now)
	if took := time.Since(began); took > time.Second {
		t.Errorf("took %s", took)
	}
	if len(got) != 1 || now.Sub(got[0]) >= time.Second {
		t.Errorf("ticks %v, want the one in the last second before %v", got, now)
	}
	if got := periodicOf(t, "@every 1s", time.UTC, MissedRunAll).due(yearAgo, now); len(got) != maxMissedTicks || !got[0].After(yearAgo) {
		t.Errorf("MissedRunAll: %d ticks from %v, want the %d after %v", len(got), got[0], maxMissedTicks, yearAgo)
	}
}

// After hours with no tick, the latest one is still found: a weekday
// schedule at 18:30 on a Friday, last run at 17:20, is due its 17:55 tick.
func TestPeriodicLatestTickAfterAQuietStretch(t *testing.T) {
	p := periodicOf(t, "*/5 9-17 * * MON-FRI", time.UTC, MissedRunOnce)
	last := time.Date(2026, 11, 20, 17, 20, 0, 0, time.UTC) // a Friday
	now := time.Date(2026, 11, 20, 18, 30, 0, 0, time.UTC)
	want := time.Date(2026, 11, 20, 17, 55, 0, 0, time.UTC)
	if got := p.due(last, now); len(got) != 1 || !got[0].Equal(want) {
		t.Fatalf("ticks %v, want [%v]", got, want)
	}
}

// @every ticks fall at the same instants whenever the scheduler started.
func TestPeriodicEveryTicksAreTheSameForEveryWorker(t *testing.T) {
	s, err := cronParser.Parse("@every 90s")
	if err != nil {
		t.Fatal(err)
	}
	p := &periodic{PeriodicJob: PeriodicJob{Location: time.UTC, Missed: MissedRunAll}, schedule: every{s.(cron.ConstantDelaySchedule).Delay}}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	a := p.due(now.Add(-10*time.Minute+17*time.Second), now)
	b := p.due(now.Add(-10*time.Minute+61*time.Second), now)
	if len(a) == 0 || !slices.EqualFunc(a[len(a)-len(b):], b, time.Time.Equal) {
		t.Fatalf("ticks from two starts: %v and %v, want the second a tail of the first", a, b)
	}
}
