package runtime

import (
	"math"
	"math/rand/v2"
	"time"
)

// Backoff is an exponential retry policy with jitter: attempt n waits about
// Min * 2^(n-1), never more than Max, spread by ±Jitter of itself so that
// jobs failing together do not retry together.
type Backoff struct {
	Min    time.Duration // wait after the first failure; default 1s
	Max    time.Duration // cap; default 1h
	Jitter float64       // fraction in [0, 1]; default 0.2. Negative means none.
}

// DefaultBackoff is used for tasks that set none.
var DefaultBackoff = Backoff{Min: time.Second, Max: time.Hour, Jitter: 0.2}

func (b Backoff) withDefaults() Backoff {
	if b.Min <= 0 {
		b.Min = DefaultBackoff.Min
	}
	if b.Max <= 0 {
		b.Max = max(DefaultBackoff.Max, b.Min)
	}
	if b.Max < b.Min {
		b.Max = b.Min
	}
	switch {
	case b.Jitter == 0:
		b.Jitter = DefaultBackoff.Jitter
	case b.Jitter < 0:
		b.Jitter = 0
	case b.Jitter > 1:
		b.Jitter = 1
	}
	return b
}

// Delay is the wait before the attempt after failed attempt n (n >= 1).
func (b Backoff) Delay(attempt int) time.Duration {
	b = b.withDefaults()
	exp := float64(b.Min) * math.Pow(2, float64(max(attempt, 1)-1))
	d := math.Min(exp, float64(b.Max))
	if b.Jitter > 0 {
		d += d * b.Jitter * (2*rand.Float64() - 1)
	}
	return time.Duration(math.Max(d, 0))
}
