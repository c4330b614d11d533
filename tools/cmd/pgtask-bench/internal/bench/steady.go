package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	pgtask "github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-bench/internal/benchdb"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-bench/internal/benchtasks"
)

// measureSteady offers jobs at a steady rate (o.SteadyRate a second, 1 ms
// handlers) for o.SteadyDuration to a worker at the default Config with
// o.SteadyConcurrency, on a cluster of its own with autovacuum off: every
// claimed job leaves a dead entry in the claim index that only vacuum
// removes, and a claim that steps over them costs more with every job. It
// compares the claims of the first window (a minute, or a quarter of a
// shorter run) with those of the last. Then again with another session's
// transaction open throughout, so that not even index scans can mark the
// dead entries.
func (b *bench) measureSteady(ctx context.Context) error {
	cluster, err := pgtasktest.StartCluster(ctx, pgtasktest.ClusterOptions{
		Settings: []string{"autovacuum=off"},
	})
	if err != nil {
		return err
	}
	defer cluster.Close()
	for _, mode := range strings.Split(b.o.SteadyModes, ",") {
		for _, pinned := range []bool{false, true} {
			if err := b.steadyRun(ctx, cluster, pgtask.Mode(mode), pinned); err != nil {
				return err
			}
		}
	}
	return nil
}

// steadyProducers are the goroutines that enqueue a steady run's jobs.
const steadyProducers = 16

// steadyWindow is how long the first and the last window of a steady run
// are.
func steadyWindow(d time.Duration) time.Duration { return min(time.Minute, d/4) }

// claimTimer times the worker's claims: the round trip of each batch that
// carries a claim statement, from its start to its end. The server sends a
// batch's results only at its end, so the claim cannot be told apart from
// the statements sent with it (the previous job's settle, the commit), whose
// cost does not grow with dead claim index entries. A claim sent alone is
// timed alone.
type claimTimer struct {
	mu      sync.Mutex
	started map[*pgx.Conn]time.Time
	claims  map[*pgx.Conn]bool
	start   time.Time
	at      []time.Duration // since start
	took    []time.Duration
}

func isClaim(sql string) bool {
	return strings.Contains(sql, "pgtask.claim_jobs(") || strings.Contains(sql, "pgtask.claim_leased_jobs(")
}

func (t *claimTimer) record(now, since time.Time) {
	t.at = append(t.at, now.Sub(t.start))
	t.took = append(t.took, now.Sub(since))
}

func (t *claimTimer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.mu.Lock()
	t.started[conn] = time.Now()
	t.mu.Unlock()
	return ctx
}

func (t *claimTimer) TraceBatchQuery(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	if isClaim(data.SQL) && data.Err == nil {
		t.mu.Lock()
		t.claims[conn] = true
		t.mu.Unlock()
	}
}

func (t *claimTimer) TraceBatchEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.claims[conn] && data.Err == nil {
		t.record(now, t.started[conn])
	}
	delete(t.started, conn)
	delete(t.claims, conn)
}

type claimStartKey struct{}

func (t *claimTimer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if isClaim(data.SQL) {
		return context.WithValue(ctx, claimStartKey{}, time.Now())
	}
	return ctx
}

func (t *claimTimer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if start, ok := ctx.Value(claimStartKey{}).(time.Time); ok && data.Err == nil {
		now := time.Now()
		t.mu.Lock()
		t.record(now, start)
		t.mu.Unlock()
	}
}

// window returns the sorted durations of the claims made in [from, to).
func (t *claimTimer) window(from, to time.Duration) []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var w []time.Duration
	for i, at := range t.at {
		if at >= from && at < to {
			w = append(w, t.took[i])
		}
	}
	slices.Sort(w)
	return w
}

// timedSamples are durations stamped with when they were taken.
type timedSamples struct {
	mu   sync.Mutex
	at   []time.Duration
	took []time.Duration
}

func (s *timedSamples) add(at, took time.Duration) {
	s.mu.Lock()
	s.at = append(s.at, at)
	s.took = append(s.took, took)
	s.mu.Unlock()
}

func (s *timedSamples) window(from, to time.Duration) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var w []time.Duration
	for i, at := range s.at {
		if at >= from && at < to {
			w = append(w, s.took[i])
		}
	}
	slices.Sort(w)
	return w
}

func p50p99(sorted []time.Duration) string {
	if len(sorted) == 0 {
		return "none"
	}
	return fmt.Sprintf("p50 %s, p99 %s", ms(percentile(sorted, 0.50)), ms(percentile(sorted, 0.99)))
}

func (b *bench) steadyRun(ctx context.Context, cluster *pgtasktest.Cluster, mode pgtask.Mode, pinned bool) error {
	label := fmt.Sprintf("steady %s, %d jobs/s offered", mode, b.o.SteadyRate)
	if pinned {
		label += ", transaction held open"
	}
	url, err := pgtasktest.CreateDatabase(ctx, cluster.URL("postgres"), "")
	if err != nil {
		return err
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	pcfg.MaxConns = steadyProducers + 2
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pgtask.Migrate(ctx, pool); err != nil {
		return err
	}
	if pinned {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // it only read
		if _, err := benchdb.New(tx).PinHorizon(ctx); err != nil {
			return err
		}
	}

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	timer := &claimTimer{started: map[*pgx.Conn]time.Time{}, claims: map[*pgx.Conn]bool{}}
	cfg.ConnConfig.Tracer = timer
	qc := pgtask.QueueConfig{Mode: mode, Concurrency: b.o.SteadyConcurrency}
	w, err := pgtask.NewWorker(ctx, cfg, pgtask.Config{
		Queues: map[string]pgtask.QueueConfig{"steady": qc},
		Logger: b.quiet,
	})
	if err != nil {
		return err
	}
	defer w.Close()
	var pickup timedSamples
	var start time.Time
	var handled atomic.Int64
	// The payload carries the enqueue's start; pickup is from there to the
	// handler's start.
	if err := benchtasks.HandleNoop(w, func(_ context.Context, _ *pgtask.Job, t benchtasks.Noop) error {
		now := time.Now()
		pickup.add(now.Sub(start), now.Sub(time.Unix(0, int64(t.N))))
		time.Sleep(time.Millisecond)
		handled.Add(1)
		return nil
	}); err != nil {
		return err
	}

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Go(func() { w.Run(runCtx) }) //nolint:errcheck // Run returns nil
	time.Sleep(500 * time.Millisecond)

	stats := benchdb.New(pool)
	before, err := stats.ClaimIndexReads(ctx)
	if err != nil {
		return err
	}
	win := steadyWindow(b.o.SteadyDuration)
	start = time.Now()
	timer.mu.Lock()
	timer.start = start
	timer.at, timer.took = nil, nil
	timer.mu.Unlock()

	// Producers enqueue one job per transaction, each at its due time, until
	// the run's end: a job they could not offer in time is not offered.
	interval := time.Second / time.Duration(b.o.SteadyRate)
	total := int64(b.o.SteadyDuration / interval)
	var next, enqueued atomic.Int64
	var firstReads, lastReads [2]benchdb.ClaimIndexReadsRow
	errs := make(chan error, steadyProducers)
	var producers sync.WaitGroup
	for range steadyProducers {
		producers.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= total || time.Since(start) >= b.o.SteadyDuration {
					return
				}
				sleepCtx(ctx, time.Until(start.Add(time.Duration(i)*interval)))
				if ctx.Err() != nil {
					return
				}
				if _, err := benchtasks.EnqueueNoop(ctx, pool, benchtasks.Noop{N: int(time.Now().UnixNano())},
					pgtask.WithQueue("steady")); err != nil {
					errs <- err
					return
				}
				enqueued.Add(1)
			}
		})
	}
	// Index reads at the window bounds (statistics are flushed about once a
	// second, so the figures are approximate).
	mark := func(into *benchdb.ClaimIndexReadsRow) {
		if r, err := stats.ClaimIndexReads(ctx); err == nil {
			*into = r
		}
	}
	marks := []struct {
		at   time.Duration
		into *benchdb.ClaimIndexReadsRow
	}{{0, &firstReads[0]}, {win, &firstReads[1]}, {b.o.SteadyDuration - win, &lastReads[0]}, {b.o.SteadyDuration, &lastReads[1]}}
	firstReads[0] = before
	for _, m := range marks[1:] {
		for time.Since(start) < m.at {
			sleepCtx(ctx, min(time.Second, m.at-time.Since(start)))
			el := time.Since(start)
			b.say("%s: %.0fs/%.0fs, %d enqueued, %d handled", label, el.Seconds(), b.o.SteadyDuration.Seconds(),
				enqueued.Load(), handled.Load())
		}
		mark(m.into)
	}
	producers.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	left, err := unfinishedJobs(ctx, pool, "steady")
	if err != nil {
		return err
	}
	b.done()
	end := b.o.SteadyDuration
	firstClaims, lastClaims := timer.window(0, win), timer.window(end-win, end)
	perScan := func(r [2]benchdb.ClaimIndexReadsRow) string {
		scans := r[1].Scans - r[0].Scans
		if scans <= 0 {
			return "?"
		}
		return fmt.Sprintf("%.1f", float64(r[1].Entries-r[0].Entries)/float64(scans))
	}
	size := fmt.Sprintf("%s, %d runners", b.o.SteadyDuration, b.o.SteadyConcurrency)
	b.add(label+": claim, first "+win.String(), size,
		fmt.Sprintf("%s (%d claims; %s index entries read per scan)", p50p99(firstClaims), len(firstClaims), perScan(firstReads)), 0, "", nil)
	target, verdict := "last p99 <= 1.5x first", (*bool)(nil)
	if len(firstClaims) > 0 && len(lastClaims) > 0 {
		verdict = ok(percentile(lastClaims, 0.99) <= percentile(firstClaims, 0.99)*3/2)
	}
	b.add(label+": claim, last "+win.String(), size,
		fmt.Sprintf("%s (%d claims; %s index entries read per scan)", p50p99(lastClaims), len(lastClaims), perScan(lastReads)), 0, target, verdict)
	b.add(label+": pickup (enqueue to start)", size,
		fmt.Sprintf("all %s; last %s %s; %d of %d jobs offered (%.0f/s) unfinished at the end", p50p99(pickup.window(0, end+time.Hour)),
			win, p50p99(pickup.window(end-win, end)), left, enqueued.Load(), rate(int(enqueued.Load()), end)), 0, "", nil)
	return nil
}
