package runtime

import (
	"math"
	"testing"
	"time"
)

// A poll interval near the largest time.Duration means "very long": the
// jitter spread over it never overflows into a negative wait, which would
// make an idle worker claim in a busy loop.
func TestHugePollIntervalNeverWaitsNegative(t *testing.T) {
	c := Config{PollInterval: math.MaxInt64}.withDefaults()
	for range 1000 {
		if d := jitter(c.PollInterval); d <= 0 {
			t.Fatalf("jitter(%s) = %s", c.PollInterval, d)
		}
	}
}

// However long the maintenance interval, the term a leader counts itself
// elected for is one the database can grant (it takes milliseconds in an
// int32): a longer one would let a worker count itself leader after the
// database let another take over.
func TestLeaderTermFitsTheDatabase(t *testing.T) {
	for _, mi := range []time.Duration{250 * time.Millisecond, time.Hour, 7 * 24 * time.Hour, math.MaxInt64 / 12, math.MaxInt64} {
		w, err := newWorker(Config{MaintenanceInterval: mi})
		if err != nil {
			t.Fatal(err)
		}
		term := w.term()
		if term < leaderTerm || term > maxIdleInTransaction || term*9/10 <= 0 {
			t.Errorf("MaintenanceInterval %s: term %s, want between %s and %s", mi, term, leaderTerm, maxIdleInTransaction)
		}
		// The leader stands for election every electEveryTicks rounds,
		// well within its term.
		if every := electEveryTicks * w.cfg.MaintenanceInterval; every <= 0 || every >= term {
			t.Errorf("MaintenanceInterval %s: elections every %s, term %s", mi, every, term)
		}
	}
}
