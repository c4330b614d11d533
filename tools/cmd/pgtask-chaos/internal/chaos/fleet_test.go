package chaos

import (
	"math/rand/v2"
	"testing"
)

// TestVictimHasStartedAnAttempt: the kill loop picks only a process that
// has started an attempt, never slot 0, and none while no other has.
func TestVictimHasStartedAnAttempt(t *testing.T) {
	t.Parallel()
	o := &orchestrator{cfg: Config{Workers: 4}}
	f := newFleet(o)
	defer f.stop()
	for slot := range 4 {
		f.alive[slot] = &proc{slot: slot, instance: slot + 1}
	}
	f.alive[0].working.Store(true)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100 {
		if p := f.victim(rng); p != nil {
			t.Fatalf("picked slot %d, which has started no attempt", p.slot)
		}
	}
	f.alive[2].working.Store(true)
	for range 100 {
		if p := f.victim(rng); p != f.alive[2] {
			t.Fatalf("picked %v, want slot 2, the only one besides slot 0 that has started an attempt", p)
		}
	}
	if idle := f.idle(); len(idle) != 2 {
		t.Errorf("%d idle processes, want 2 (slots 1 and 3)", len(idle))
	}
}
