package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	pgtask "github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-bench/internal/benchdb"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-bench/internal/benchtasks"
)

// measureRates prices rate limits (pgtask.WithRate) at the default Config:
//   - in each of o.RateModes, a backlog of one key with a rate of o.Rate
//     jobs a second (the default burst) worked by 4 workers for
//     o.RateDuration: the starts after the first burst come at the rate,
//     within 5%, and no second has more than the rate and the burst;
//   - a drain whose jobs all have a rate far above what the worker can
//     start, beside the same drain without one, run just before it: what
//     the tokens' bookkeeping costs when the rate does not bind;
//   - claims of a queue without rate keys, beside other queues' rate keys
//     and without them.
func (b *bench) measureRates(ctx context.Context) error {
	for _, m := range strings.Split(b.o.RateModes, ",") {
		mode := pgtask.Mode(strings.TrimSpace(m))
		if mode == "" {
			continue // -rate-modes "": the drains only
		}
		if mode != pgtask.ModeHeld && mode != pgtask.ModeLease {
			return fmt.Errorf("-rate-modes: %q is not held or lease", m)
		}
		if err := b.measureBindingRate(ctx, mode); err != nil {
			return err
		}
	}
	n := b.o.DefaultsJobs
	base, err := b.drainWith(ctx, false, drainSpec{label: "defaults: drain ungrouped, no rate", n: n},
		func(ctx context.Context, pool *pgxpool.Pool) error { return enqueueNoops(ctx, pool, "bench", n, 0) })
	if err != nil {
		return err
	}
	const far = 1_000_000
	label := fmt.Sprintf("defaults: drain ungrouped, one key of rate %d/s (not binding)", far)
	rated, err := b.drainWith(ctx, false, drainSpec{label: label, n: n},
		func(ctx context.Context, pool *pgxpool.Pool) error {
			return enqueueRated(ctx, pool, n, pgtask.WithRate("far", far, time.Second))
		})
	if err != nil {
		return err
	}
	b.addVersus(label, n, rate(n, rated.elapsed), rate(n, base.elapsed), 0.8, "the same without a rate")
	return b.measureClaimBesideRates(ctx)
}

// measureClaimBesideRates times claims of 10 jobs of a queue without rate
// keys, first alone, then beside o.LimitKeys rate keys of another queue,
// each ready with a job waiting: a queue without rate keys pays one probe
// of an index of its own keys, whatever other queues hold.
func (b *bench) measureClaimBesideRates(ctx context.Context) error {
	const runnable, iterations = 10_000, 1_000
	measure := func(keys int) ([]time.Duration, error) {
		pool, _, cleanup, err := b.database(ctx, b.o.Conns)
		if err != nil {
			return nil, err
		}
		defer cleanup()
		for start := 0; start < keys; start += 1_000 {
			reqs := make([]pgtask.EnqueueRequest, 0, 1_000)
			for k := start; k < min(start+1_000, keys); k++ {
				r := pgtask.EnqueueRequest{Kind: benchtasks.NoopKind, Payload: []byte(`{"n":0}`)}
				r.Apply(pgtask.WithQueue("other"), pgtask.WithRate(fmt.Sprintf("k%d", k), 1, time.Hour))
				reqs = append(reqs, r)
			}
			if _, err := pgtask.EnqueueMany(ctx, pool, reqs); err != nil {
				return nil, err
			}
		}
		if err := enqueueNoops(ctx, pool, "bench", runnable, 0); err != nil {
			return nil, err
		}
		b.say("claim beside %d rate keys: timing %d claims", keys, iterations)
		lat, err := claimTimes(ctx, pool, iterations)
		b.done()
		return lat, err
	}
	none, err := measure(0)
	if err != nil {
		return err
	}
	beside, err := measure(b.o.LimitKeys)
	if err != nil {
		return err
	}
	b.addClaimVersus(fmt.Sprintf("claim 10 jobs of a queue without rates, beside %d ready rate keys", b.o.LimitKeys),
		runnable, beside, none, "no rate keys")
	return nil
}

// measureBindingRate works a backlog of one rate key with 4 workers at the
// default Config in mode, and checks the starts the jobs' rows record.
func (b *bench) measureBindingRate(ctx context.Context, mode pgtask.Mode) error {
	r, burst := b.o.Rate, pgtask.DefaultRateBurst(b.o.Rate)
	seconds := b.o.RateDuration.Seconds()
	n := burst + int(float64(r)*seconds)
	label := fmt.Sprintf("rate limit %d/s, burst %d, 4 workers (%s)", r, burst, mode)
	pool, url, cleanup, err := b.database(ctx, b.o.Conns)
	if err != nil {
		return err
	}
	defer cleanup()
	b.say("%s: enqueueing %d jobs", label, n)
	if err := enqueueRated(ctx, pool, n, pgtask.WithRate("api", r, time.Second)); err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for range 4 {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			return err
		}
		// The four workers start one after another, each counting the
		// connections of those before it as crowding, beside whatever else
		// shares the server (a test suite's other packages): the check is
		// against max_connections, which is what the four need to fit in.
		// It changes nothing in how they work.
		w, err := pgtask.NewWorker(ctx, cfg, pgtask.Config{
			Queues:          map[string]pgtask.QueueConfig{"bench": {Mode: mode}},
			Logger:          b.quiet,
			ConnectionCheck: pgtask.CheckMax,
		})
		if err != nil {
			return err
		}
		defer w.Close()
		if err := benchtasks.HandleNoop(w, func(context.Context, *pgtask.Job, benchtasks.Noop) error { return nil }); err != nil {
			return err
		}
		wg.Go(func() { _ = w.Run(runCtx) })
	}
	if err := b.waitFinished(ctx, pool, "bench", label, "jobs started", n, 250*time.Millisecond); err != nil {
		return err
	}
	b.done()
	starts, err := benchdb.New(pool).StartTimes(ctx, "bench")
	if err != nil {
		return err
	}
	if len(starts) != n {
		return fmt.Errorf("%s: %d jobs recorded a start, want %d", label, len(starts), n)
	}
	span := starts[len(starts)-1].Sub(starts[0]).Seconds()
	got := float64(n-burst) / span
	most := mostInWindow(starts, time.Second)
	b.add(label, fmt.Sprintf("%d jobs, %.0f s", n, seconds),
		fmt.Sprintf("%.2f starts/s after the first burst; most in any 1 s: %d", got, most), 0,
		fmt.Sprintf("%d/s ±5%%, <= %d in any 1 s", r, r+burst),
		ok(got >= 0.95*float64(r) && got <= 1.05*float64(r) && most <= r+burst))
	return nil
}

// mostInWindow is the most of the sorted times ts in any window of length w.
func mostInWindow(ts []time.Time, w time.Duration) int {
	most, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// enqueueRated enqueues n no-op jobs of queue "bench" with the rate opt.
func enqueueRated(ctx context.Context, pool *pgxpool.Pool, n int, opt pgtask.EnqueueOption) error {
	const chunk = 5_000
	for start := 0; start < n; start += chunk {
		ts := make([]benchtasks.Noop, 0, min(chunk, n-start))
		for i := start; i < min(start+chunk, n); i++ {
			ts = append(ts, benchtasks.Noop{N: i})
		}
		if _, err := benchtasks.EnqueueNoopMany(ctx, pool, ts, pgtask.WithQueue("bench"), opt); err != nil {
			return err
		}
	}
	return benchdb.New(pool).AnalyzeJobs(ctx)
}
