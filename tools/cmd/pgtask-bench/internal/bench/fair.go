package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	pgtask "github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-bench/internal/benchdb"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-bench/internal/benchtasks"
)

// newcomerBase marks the newcomer's jobs (tenant b) in the fairness
// measure: their N is this plus their place.
const newcomerBase = 1_000_000_000

// fairTarget is the target: tenant b's last job starts before a's
// backlog has drained 1,000 further jobs.
const fairTarget = 1_000

// measureFair measures fair queues (docs/fairness.md) at the default
// Config, in each mode:
//   - tenant a enqueues o.FairFlood jobs into a fair queue; once a worker
//     has started 1,000 of them, tenant b enqueues o.FairNewcomer, in one
//     statement and then one job per transaction; how many of a's jobs
//     start after b's (last) enqueue committed and before b's last job
//     starts;
//   - what fairness costs the drain: the same jobs spread over o.FairTenants
//     tenants of a fair queue, against the same drain of a queue that is
//     not fair, run just before it.
func (b *bench) measureFair(ctx context.Context) error {
	for _, mode := range []pgtask.Mode{pgtask.ModeHeld, pgtask.ModeLease} {
		prefix := "defaults: "
		if mode == pgtask.ModeLease {
			prefix = "lease defaults: "
		}
		qc := pgtask.QueueConfig{Mode: mode}
		for _, onePerTx := range []bool{false, true} {
			if err := b.measureNewcomer(ctx, prefix, qc, onePerTx); err != nil {
				return err
			}
		}
		n, tenants := b.o.DefaultsJobs, b.o.FairTenants
		base, err := b.drainWith(ctx, false, drainSpec{label: prefix + "drain ungrouped, not fair", n: n, qc: qc},
			func(ctx context.Context, pool *pgxpool.Pool) error { return enqueueNoops(ctx, pool, "bench", n, 0) })
		if err != nil {
			return err
		}
		label := fmt.Sprintf("%sdrain ungrouped, fair over %d tenants", prefix, tenants)
		fair, err := b.drainWith(ctx, false, drainSpec{label: label, n: n, qc: qc},
			func(ctx context.Context, pool *pgxpool.Pool) error { return enqueueTenants(ctx, pool, n, tenants) })
		if err != nil {
			return err
		}
		b.addVersus(label, n, rate(n, fair.elapsed), rate(n, base.elapsed), 0.8, "the same, not fair")
		pinnedLabel := label + ", transaction held open"
		pinned, err := b.drainWith(ctx, true, drainSpec{label: pinnedLabel, n: n, qc: qc},
			func(ctx context.Context, pool *pgxpool.Pool) error { return enqueueTenants(ctx, pool, n, tenants) })
		if err != nil {
			return err
		}
		b.addVersus(pinnedLabel, n, rate(n, pinned.elapsed), rate(n, fair.elapsed), 0.8, "the same without it")
	}
	return nil
}

// enqueueTenants enqueues n no-op jobs into the fair queue "bench", job i
// of tenant i % tenants, in statements of 5,000.
func enqueueTenants(ctx context.Context, pool *pgxpool.Pool, n, tenants int) error {
	const chunk = 5_000
	for start := 0; start < n; start += chunk {
		byTenant := make([][]benchtasks.Noop, tenants)
		for i := start; i < min(start+chunk, n); i++ {
			byTenant[i%tenants] = append(byTenant[i%tenants], benchtasks.Noop{N: i})
		}
		for t, ts := range byTenant {
			if len(ts) == 0 {
				continue
			}
			if _, err := benchtasks.EnqueueNoopMany(ctx, pool, ts, pgtask.WithTenant(fmt.Sprintf("t%d", t))); err != nil {
				return err
			}
		}
	}
	return benchdb.New(pool).AnalyzeJobs(ctx)
}

// measureNewcomer is the first of measureFair's measures. With onePerTx, b
// enqueues its jobs one per transaction while its earlier ones are being
// claimed: each is a tenant's next job, or its first again once the ones
// before it ran, and the claims must find it at its turn whether or not
// its enqueue woke a worker. a's starts are counted from the commit of b's
// last enqueue then: those before it are the ones that ran while b was
// still enqueueing.
func (b *bench) measureNewcomer(ctx context.Context, prefix string, qc pgtask.QueueConfig, onePerTx bool) error {
	flood, newcomer := b.o.FairFlood, b.o.FairNewcomer
	how := ""
	if onePerTx {
		how = ", one per transaction,"
	}
	label := fmt.Sprintf("%sfair: tenant b's %d jobs%s behind tenant a's %d", prefix, newcomer, how, flood)
	pool, url, cleanup, err := b.database(ctx, b.o.Conns)
	if err != nil {
		return err
	}
	defer cleanup()
	b.say("%s: enqueueing a's %d jobs", label, flood)
	const chunk = 5_000
	for start := 0; start < flood; start += chunk {
		ts := make([]benchtasks.Noop, 0, chunk)
		for i := start; i < min(start+chunk, flood); i++ {
			ts = append(ts, benchtasks.Noop{N: i})
		}
		if _, err := benchtasks.EnqueueNoopMany(ctx, pool, ts, pgtask.WithTenant("a")); err != nil {
			return err
		}
	}
	if err := benchdb.New(pool).AnalyzeJobs(ctx); err != nil {
		return err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	w, err := pgtask.NewWorker(ctx, cfg, pgtask.Config{Queues: map[string]pgtask.QueueConfig{"bench": qc}, Logger: b.quiet})
	if err != nil {
		return err
	}
	defer w.Close()
	// a's starts once b's enqueue has committed, until b's last start.
	var started atomic.Int64
	var mu sync.Mutex
	bEnqueued, bDone, aAfter := false, 0, 0
	allB := make(chan struct{})
	err = benchtasks.HandleNoop(w, func(ctx context.Context, job *pgtask.Job, t benchtasks.Noop) error {
		started.Add(1)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case t.N >= newcomerBase:
			bDone++
			if bDone == newcomer {
				close(allB)
			}
		case bEnqueued && bDone < newcomer:
			aAfter++
		}
		return nil
	})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = w.Run(runCtx) })
	defer func() { stop(); wg.Wait() }()
	warm := int64(min(1_000, flood/2))
	for started.Load() < warm {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	ts := make([]benchtasks.Noop, newcomer)
	for i := range ts {
		ts[i] = benchtasks.Noop{N: newcomerBase + i}
	}
	if onePerTx {
		for i, t := range ts {
			if _, err := benchtasks.EnqueueNoop(ctx, pool, t, pgtask.WithTenant("b")); err != nil {
				return err
			}
			if i == len(ts)-1 {
				mu.Lock()
				bEnqueued = true
				mu.Unlock()
			}
		}
	} else {
		if _, err := benchtasks.EnqueueNoopMany(ctx, pool, ts, pgtask.WithTenant("b")); err != nil {
			return err
		}
		mu.Lock()
		bEnqueued = true
		mu.Unlock()
	}
	b.say("%s: b enqueued after %d starts", label, started.Load())
	select {
	case <-allB:
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("%s: b's jobs did not all start within 5 minutes", label)
	case <-ctx.Done():
		return ctx.Err()
	}
	mu.Lock()
	a := aAfter
	mu.Unlock()
	b.done()
	stop()
	wg.Wait()
	if runErr != nil {
		return runErr
	}
	after := "b's enqueue"
	if onePerTx {
		after = "b's last enqueue"
	}
	b.add(label, fmt.Sprintf("%d + %d jobs", flood, newcomer),
		fmt.Sprintf("%d of a's jobs started after %s before b's last", a, after), 0,
		fmt.Sprintf("< %d", fairTarget), ok(a < fairTarget))
	return nil
}
