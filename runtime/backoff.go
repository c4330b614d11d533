package runtime

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// Backoff is an exponential retry policy with jitter: attempt n waits about
// Min * 2^(n-1), never more than Max, spread by ±Jitter of itself so that
// jobs failing together do not retry together.
//
// The zero Backoff is DefaultBackoff().
type Backoff struct {
	Min    time.Duration // wait after the first failure; default 1s
	Max    time.Duration // cap; default 1h
	Jitter float64       // fraction in [0, 1]; default 0.2. Negative means none.
}

// defaultBackoff fills what a Backoff leaves zero. It is unexported so that
// no code can change the policy under running workers, or make one process
// retry differently from another.
var defaultBackoff = Backoff{Min: time.Second, Max: time.Hour, Jitter: 0.2}

// DefaultBackoff returns the policy of tasks that set none: 1s, doubling up
// to 1h, ±20%. The zero Backoff means the same, and each zero field of a
// Backoff takes its value from here.
func DefaultBackoff() Backoff { return defaultBackoff }

func (b Backoff) withDefaults() Backoff {
	if b.Min <= 0 {
		b.Min = defaultBackoff.Min
	}
	if b.Max <= 0 {
		b.Max = max(defaultBackoff.Max, b.Min)
	}
	if b.Max < b.Min {
		b.Max = b.Min
	}
	switch {
	case b.Jitter == 0 || math.IsNaN(b.Jitter):
		b.Jitter = defaultBackoff.Jitter
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
	if d >= math.MaxInt64 {
		// Past the largest time.Duration, which would convert to a
		// negative one: a retry at once.
		return math.MaxInt64
	}
	return time.Duration(math.Max(d, 0))
}

// The worker's own retries of a failing database call (claiming, requeueing
// a lost session's jobs, listening) wait 100ms, doubling up to 5s: quick to
// recover from a blip, gentle on a database that is down.
const (
	retryFirst = 100 * time.Millisecond
	retryCap   = 5 * time.Second
)

// retryDelay spaces one loop's retries; the zero value is ready to use.
type retryDelay struct{ last time.Duration }

// next returns how long to wait before the next try: retryFirst after a
// reset, then twice the previous wait, never more than retryCap.
func (d *retryDelay) next() time.Duration {
	d.last = min(max(d.last*2, retryFirst), retryCap)
	return d.last
}

// reset starts over from retryFirst, once a try succeeded.
func (d *retryDelay) reset() { d.last = 0 }

// sleep waits for d or until ctx is done, whichever comes first.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// bookkeeping bounds each of the worker's own statements. They are not cut
// short by shutdown: they record what the handlers did.
const bookkeeping = 30 * time.Second

func bookCtx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(parent), bookkeeping)
}

// jitter spreads d by ±10% so idle runners do not poll in step.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.2-0.1)*float64(d))
}
