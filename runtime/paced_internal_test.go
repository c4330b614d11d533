package runtime

import (
	"context"
	"testing"
	"time"
)

// sleepy is a maintenance service whose step takes d.
type sleepy struct {
	d     time.Duration
	steps int
}

func (s *sleepy) step(context.Context) error {
	s.steps++
	time.Sleep(s.d)
	return nil
}

// A paced service whose step is cheap runs every round; one whose step is
// slow (a rescue stepping over the dead entries a transaction held open
// keeps) runs only once share times its duration has passed.
func TestAPacedServiceRunsLessOftenAsItsStepsCostMore(t *testing.T) {
	ctx := context.Background()
	rounds := func(d time.Duration) int {
		s := &sleepy{d: d}
		p := &paced{s: s, share: 20}
		end := time.Now().Add(time.Second)
		for time.Now().Before(end) {
			if err := p.step(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond) // the round's other work
		}
		return s.steps
	}
	cheap := rounds(0)
	slow := rounds(20 * time.Millisecond) // then due again 400 ms after it began
	t.Logf("steps in 1 s: %d cheap, %d slow", cheap, slow)
	if cheap < 50 {
		t.Errorf("a cheap step ran %d times in 1 s of 10 ms rounds, want nearly every round", cheap)
	}
	if slow < 2 || slow > 4 {
		t.Errorf("a 20 ms step with share 20 ran %d times in 1 s, want 3 (at 0, 400 and 800 ms)", slow)
	}
}
