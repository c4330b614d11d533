package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	pgtask "github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-bench/internal/benchdb"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-bench/internal/benchtasks"
)

// visibleEvery is how often the latency measures ask whether a success is
// visible: the latencies they print are rounded up by up to this much.
const visibleEvery = 250 * time.Microsecond

// measureVisible times, for an idle worker at the default Config in each
// mode, how long a job takes from its enqueue's commit until another session
// sees it succeeded: what batching must not slow for a lone job.
func (b *bench) measureVisible(ctx context.Context) error {
	for _, mode := range []pgtask.Mode{pgtask.ModeHeld, pgtask.ModeLease} {
		lat, err := b.visibleLatencies(ctx, mode)
		if err != nil {
			return err
		}
		p50, p99 := percentile(lat, 0.5), percentile(lat, 0.99)
		b.add(fmt.Sprintf("%s, idle worker: enqueue committed to success visible", mode), fmt.Sprintf("%d samples", len(lat)),
			fmt.Sprintf("p50 %s, p99 %s", ms(p50), ms(p99)), 0, "p50 <= 5ms, p99 <= 15ms",
			ok(p50 <= 5*time.Millisecond && p99 <= 15*time.Millisecond))
	}
	return nil
}

func (b *bench) visibleLatencies(ctx context.Context, mode pgtask.Mode) ([]time.Duration, error) {
	pool, url, cleanup, err := b.database(ctx, b.o.Conns)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	w, err := pgtask.NewWorker(ctx, cfg, pgtask.Config{
		Queues:       map[string]pgtask.QueueConfig{"bench": {Mode: mode}},
		PollInterval: time.Minute, // only notifications wake it
		Logger:       b.quiet,
	})
	if err != nil {
		return nil, err
	}
	defer w.Close()
	if err := benchtasks.HandleNoop(w, func(context.Context, *pgtask.Job, benchtasks.Noop) error { return nil }); err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(runCtx) }) //nolint:errcheck // Run returns nil
	defer func() { stop(); wg.Wait() }()
	time.Sleep(500 * time.Millisecond) // listening and idle

	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	q := benchdb.New(conn)
	lat := make([]time.Duration, 0, b.o.WakeSamples)
	for i := range b.o.WakeSamples {
		time.Sleep(20 * time.Millisecond) // let the worker go idle again
		id, err := benchtasks.EnqueueNoop(ctx, pool, benchtasks.Noop{N: i})
		if err != nil {
			return nil, err
		}
		at := time.Now()
		for {
			seen, err := q.SucceededAmong(ctx, []int64{int64(id)})
			if err != nil {
				return nil, err
			}
			if len(seen) > 0 {
				break
			}
			if time.Since(at) > 10*time.Second {
				return nil, fmt.Errorf("sample %d: the idle worker's success was not visible within 10s", i)
			}
			time.Sleep(visibleEvery)
		}
		lat = append(lat, time.Since(at))
		if i%20 == 0 {
			b.say("%s: success visible: %d/%d", mode, i, b.o.WakeSamples)
		}
	}
	b.done()
	slices.Sort(lat)
	return lat, nil
}

// measureCommitDelay drains, in held mode at the default Config, a queue
// whose handlers take 1 ms, but one in ten 100 ms, and times from each
// handler's successful return until another session sees its success:
// how long batching holds a success back from its commit. The same drain
// at BatchSize 1, where each job commits on its own, shows what the commit
// costs without batching.
func (b *bench) measureCommitDelay(ctx context.Context) error {
	for _, c := range []struct {
		label string
		qc    pgtask.QueueConfig
	}{
		{"held", pgtask.QueueConfig{}},
		{"held, BatchSize 1", pgtask.QueueConfig{BatchSize: 1}},
	} {
		const n = 2_000
		lat, err := b.commitDelays(ctx, c.label, c.qc, n)
		if err != nil {
			return err
		}
		p50, p99 := percentile(lat, 0.5), percentile(lat, 0.99)
		target, met := "none (a setting, not the default)", (*bool)(nil)
		if c.qc.BatchSize == 0 {
			limit := pgtask.DefaultCommitBudget + 5*time.Millisecond
			target, met = fmt.Sprintf("p99 <= %s (commit budget + 5ms)", ms(limit)), ok(p99 <= limit)
		}
		b.add(c.label+", 1ms handlers and 1 in 10 of 100ms: success to its commit visible", fmt.Sprintf("%d jobs", n),
			fmt.Sprintf("p50 %s, p99 %s", ms(p50), ms(p99)), 0, target, met)
	}
	return nil
}

func (b *bench) commitDelays(ctx context.Context, label string, qc pgtask.QueueConfig, n int) ([]time.Duration, error) {
	pool, url, cleanup, err := b.database(ctx, b.o.Conns)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	reqs := make([]benchtasks.Sleep, n)
	for i := range reqs {
		reqs[i].Ms = 1
		if i%10 == 0 {
			reqs[i].Ms = 100
		}
	}
	if _, err := benchtasks.EnqueueSleepMany(ctx, pool, reqs); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	w, err := pgtask.NewWorker(ctx, cfg, pgtask.Config{Queues: map[string]pgtask.QueueConfig{"bench": qc}, Logger: b.quiet})
	if err != nil {
		return nil, err
	}
	defer w.Close()
	var mu sync.Mutex
	returned := map[int64]time.Time{}
	if err := benchtasks.HandleSleep(w, func(_ context.Context, job *pgtask.Job, s benchtasks.Sleep) error {
		time.Sleep(time.Duration(s.Ms) * time.Millisecond)
		mu.Lock()
		returned[int64(job.ID)] = time.Now()
		mu.Unlock()
		return nil
	}); err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(runCtx) }) //nolint:errcheck // Run returns nil
	defer func() { stop(); wg.Wait() }()

	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	q := benchdb.New(conn)
	lat := make([]time.Duration, 0, n)
	start := time.Now()
	for len(lat) < n {
		if time.Since(start) > 5*time.Minute {
			return nil, fmt.Errorf("%d of %d successes visible after 5 minutes", len(lat), n)
		}
		mu.Lock()
		ids := make([]int64, 0, len(returned))
		for id := range returned {
			ids = append(ids, id)
		}
		mu.Unlock()
		b.say("%s, mixed 1ms/100ms handlers: %d/%d successes visible", label, len(lat), n)
		if len(ids) == 0 {
			time.Sleep(visibleEvery)
			continue
		}
		seen, err := q.SucceededAmong(ctx, ids)
		if err != nil {
			return nil, err
		}
		now := time.Now()
		mu.Lock()
		for _, id := range seen {
			lat = append(lat, now.Sub(returned[id]))
			delete(returned, id)
		}
		mu.Unlock()
		time.Sleep(visibleEvery)
	}
	b.done()
	slices.Sort(lat)
	return lat, nil
}
