package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgtask/pgtask/gen"
)

// RateInfo is the state of one rate key (see EnqueueOptions.Rate): its rate,
// its tokens and its waiting jobs now.
type RateInfo struct {
	Queue string
	Key   string // "" for the queue's own rate
	// Rate jobs start per Per at most, in bursts of at most Burst: the
	// rate in force, an operator's (Overridden) or the declared one (the
	// latest enqueue's).
	Rate       int
	Per        time.Duration
	Burst      int
	Overridden bool
	Declared   Rate
	// Tokens is how many jobs of the key may start now (whole tokens;
	// the fraction is the next one coming).
	Tokens float64
	// ReadyAt is when the key's next token is due while jobs wait on it;
	// zero while none waits.
	ReadyAt time.Time
	Waiting int64 // queued, waiting for a token
}

// Rate is a rate limit: N jobs per Per, in bursts of at most Burst.
type Rate struct {
	N     int
	Per   time.Duration
	Burst int
}

// SetRate sets an operator's rate for key of queue ("" for the queue's own
// rate): n jobs per per, in bursts of at most burst (0: DefaultRateBurst).
// It wins over the rate the tasks declare, at once and for every worker,
// until it is cleared: n 0 clears it. The key keeps the tokens it has, up
// to the new burst. It reports how many live keys it changed (0 or 1).
func SetRate(ctx context.Context, db DB, queue, key string, n int, per time.Duration, burst int) (int, error) {
	if err := checkName("queue", queue, MaxQueueBytes); err != nil || queue == "" {
		return 0, fmt.Errorf("set rate: %w", cmp.Or(err, errors.New("queue name is empty")))
	}
	if err := checkName("rate key", key, MaxGroupKeyBytes); err != nil {
		return 0, fmt.Errorf("set rate: %w", err)
	}
	switch {
	case n < 0 || n > math.MaxInt32:
		return 0, fmt.Errorf("set rate of key %q in queue %s: %d is out of range [1, %d] (0 clears it)", key, queue, n, math.MaxInt32)
	case n > 0 && per < time.Millisecond:
		return 0, fmt.Errorf("set rate of key %q in queue %s: period %s is below 1ms", key, queue, per)
	case burst < 0 || burst > math.MaxInt32:
		return 0, fmt.Errorf("set rate of key %q in queue %s: burst %d is out of range [1, %d] (0: the default)", key, queue, burst, math.MaxInt32)
	}
	p := gen.SetRateParams{Queue: queue, RateKey: key}
	if n > 0 {
		p.Rate = pgtype.Int4{Int32: int32(n), Valid: true}
		p.PeriodUs = pgtype.Int8{Int64: per.Microseconds(), Valid: true}
		p.Burst = pgtype.Int4{Int32: int32(burst), Valid: burst > 0}
	}
	changed, err := gen.New(db).SetRate(ctx, p)
	if err != nil {
		return 0, fmt.Errorf("set rate of key %q in queue %s: %w", key, queue, err)
	}
	return int(changed), nil
}

// Rates lists the rate keys of queue (every queue for ""), at most max of
// them (0: 1000), by queue and key.
func Rates(ctx context.Context, db DB, queue string, max int) ([]RateInfo, error) {
	if max <= 0 {
		max = 1000
	}
	rows, err := gen.New(db).ListRates(ctx, gen.ListRatesParams{Queue: queue, MaxRows: int32(min(max, math.MaxInt32))})
	if err != nil {
		return nil, fmt.Errorf("list rates: %w", err)
	}
	out := make([]RateInfo, len(rows))
	for i, r := range rows {
		out[i] = RateInfo{Queue: r.Queue, Key: r.RateKey, Rate: int(r.Rate), Per: time.Duration(r.PeriodUs) * time.Microsecond,
			Burst: int(r.Burst), Overridden: r.Overridden, Tokens: r.Tokens, Waiting: r.Waiting,
			Declared: Rate{N: int(r.DeclaredRate), Per: time.Duration(r.DeclaredPeriodUs) * time.Microsecond, Burst: int(r.DeclaredBurst)}}
		if r.ReadyAt != nil {
			out[i].ReadyAt = *r.ReadyAt
		}
	}
	return out, nil
}

// minRateWait is the least an idle runner waits for its queue's next token
// after a claim that found none: the token it was told of may be one
// another worker is taking in a claim not yet committed.
const minRateWait = 500 * time.Microsecond

// rateRaces is how many claims in a row may find a token due and take
// none before the runner backs off (see rateClock.misses).
const rateRaces = 3

// rateClock is what a queue's runners know of its rate keys (see
// functions/rates.sql): whether it has any, and when its next token is
// due, as of the last claim.
type rateClock struct {
	// rated: the queue has rate keys (maintenance looks), so claims read
	// when its next token is due.
	rated bool
	// at is when, in Unix nanoseconds, the next token is due; 0: no job
	// waits on a rate.
	at int64
	// sleeper: a runner waits for that token; the queue's others wait for
	// a wake-up or the poll, so that a token wakes one runner, not all.
	sleeper bool
	// misses counts the claims in a row that found a token due but took
	// none: another session holds the key's row (an enqueue left open, a
	// claim in flight). Each doubles the wait for the next try, up to the
	// poll, so that such a key is not claimed from in a loop, once more
	// than rateRaces in a row missed.
	misses int
}

// queueRateWait adds to b, when the queue has rate keys, the read of when
// its next token is due; b's claim comes before it.
func (q *queue) queueRateWait(b *pgx.Batch) {
	if !q.rates.Load().rated {
		return
	}
	b.Queue(gen.RateWait, q.name).QueryRow(func(row pgx.Row) error {
		var us int64
		if err := row.Scan(&us); err != nil {
			return err
		}
		at := int64(0)
		if us >= 0 {
			at = time.Now().Add(time.Duration(us) * time.Microsecond).UnixNano()
		}
		q.updateRates(func(c *rateClock) {
			c.at = at
			if us != 0 {
				c.misses = 0 // a token to come, or none waiting: nothing missed
			}
		})
		return nil
	})
}

// updateRates changes the queue's rateClock with f.
func (q *queue) updateRates(f func(*rateClock)) {
	for {
		old := q.rates.Load()
		c := *old
		f(&c)
		if q.rates.CompareAndSwap(old, &c) {
			return
		}
	}
}

// idleWait is how long an idle runner waits before it claims again if not
// woken: the poll, or, for the one runner of a queue that waits for its
// next token (the release function says it stopped waiting), until then.
func (q *queue) idleWait(poll time.Duration) (time.Duration, func()) {
	c := q.rates.Load()
	if !c.rated || c.at == 0 || c.sleeper {
		return poll, func() {}
	}
	took, misses := false, 0
	q.updateRates(func(c *rateClock) {
		took, misses = !c.sleeper, c.misses
		c.sleeper = true
		if took && time.Until(time.Unix(0, c.at)) <= 0 {
			// The claim just made found the token due and took nothing.
			c.misses++
		}
	})
	if !took {
		return poll, func() {}
	}
	d := time.Until(time.Unix(0, c.at))
	if d <= 0 {
		// A few misses in a row are workers racing for one token (the
		// winner's claim not yet committed); more, a row held open.
		d = minRateWait << min(max(misses-rateRaces, 0), 16)
	}
	return min(poll, max(d, minRateWait)), func() { q.updateRates(func(c *rateClock) { c.sleeper = false }) }
}
