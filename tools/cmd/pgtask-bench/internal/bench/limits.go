package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/gen"
	pgtask "github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-bench/internal/benchdb"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-bench/internal/benchtasks"
)

// defaultConcurrency is a queue's Concurrency at the zero QueueConfig, by
// mode (see pgtask.QueueConfig.Concurrency).
func defaultConcurrency(mode pgtask.Mode) int {
	if mode == pgtask.ModeLease {
		return 100
	}
	return 10
}

// measureLimits prices concurrency limits (pgtask.WithLimit) at the default
// Config, in each mode, each drain beside the same drain without limits,
// run just before it:
//   - a queue's own limit equal to the worker's Concurrency, which never
//     holds a handler back: the limit's bookkeeping alone;
//   - o.LimitKeys keys of limit 2 against as many groups, each a limit of 1;
//   - claims with o.WaitingKeys keys at their limit, each with a job
//     waiting, against claims with none: waiting jobs stay out of the claim
//     index, so a claim never steps over them.
func (b *bench) measureLimits(ctx context.Context) error {
	n := b.o.DefaultsJobs
	for _, mode := range []pgtask.Mode{pgtask.ModeHeld, pgtask.ModeLease} {
		prefix := "defaults: "
		if mode == pgtask.ModeLease {
			prefix = "lease defaults: "
		}
		qc := pgtask.QueueConfig{Mode: mode}
		conc := defaultConcurrency(mode)

		base, err := b.drainWith(ctx, false, drainSpec{label: prefix + "drain ungrouped, no limit", n: n, qc: qc},
			func(ctx context.Context, pool *pgxpool.Pool) error { return enqueueNoops(ctx, pool, "bench", n, 0) })
		if err != nil {
			return err
		}
		label := fmt.Sprintf("%sdrain ungrouped, queue's limit %d (= Concurrency)", prefix, conc)
		lim, err := b.drainWith(ctx, false, drainSpec{label: label, n: n, qc: qc},
			func(ctx context.Context, pool *pgxpool.Pool) error { return enqueueLimited(ctx, pool, n, 1, conc) })
		if err != nil {
			return err
		}
		b.addVersus(label, n, rate(n, lim.elapsed), rate(n, base.elapsed), 0.9, "the same without a limit")

		groups := b.o.LimitKeys
		base, err = b.drainWith(ctx, false, drainSpec{label: fmt.Sprintf("%sdrain %d groups (FIFO)", prefix, groups), n: n, qc: qc},
			func(ctx context.Context, pool *pgxpool.Pool) error {
				return enqueueNoops(ctx, pool, "bench", n, groups)
			})
		if err != nil {
			return err
		}
		label = fmt.Sprintf("%sdrain %d keys, limit 2 each", prefix, groups)
		lim, err = b.drainWith(ctx, false, drainSpec{label: label, n: n, qc: qc},
			func(ctx context.Context, pool *pgxpool.Pool) error { return enqueueLimited(ctx, pool, n, groups, 2) })
		if err != nil {
			return err
		}
		b.addVersus(label, n, rate(n, lim.elapsed), rate(n, base.elapsed), 0.8, fmt.Sprintf("the %d-group drain", groups))
	}
	return b.measureClaimWaiting(ctx)
}

// addVersus adds a drain's row with a target as a ratio to another drain's
// rate.
func (b *bench) addVersus(label string, n int, got, base, want float64, of string) {
	b.add(label, fmt.Sprintf("%d jobs", n), fmt.Sprintf("%s (%.2fx %s: %s)", fmtRate(got), got/base, of, fmtRate(base)), got,
		fmt.Sprintf(">= %.2fx %s", want, of), ok(got >= want*base))
}

// enqueueLimited enqueues n no-op jobs of queue "bench", job i with a
// limit of max for key i % keys (keys 1: the queue's own limit).
func enqueueLimited(ctx context.Context, pool *pgxpool.Pool, n, keys, max int) error {
	const chunk = 5_000
	for start := 0; start < n; start += chunk {
		reqs := make([]pgtask.EnqueueRequest, 0, min(chunk, n-start))
		for i := start; i < min(start+chunk, n); i++ {
			key := ""
			if keys > 1 {
				key = "k" + strconv.Itoa(i%keys)
			}
			reqs = append(reqs, limitedNoop(i, key, max))
		}
		if _, err := pgtask.EnqueueMany(ctx, pool, reqs); err != nil {
			return err
		}
	}
	return benchdb.New(pool).AnalyzeJobs(ctx)
}

// limitedNoop is a no-op job of queue "bench" with a limit of max on key.
func limitedNoop(i int, key string, max int) pgtask.EnqueueRequest {
	payload, _ := json.Marshal(benchtasks.Noop{N: i}) //nolint:errchkjson // an int field
	r := pgtask.EnqueueRequest{Kind: benchtasks.NoopKind, Payload: payload}
	r.Apply(pgtask.WithQueue("bench"), pgtask.WithLimit(key, max))
	return r
}

// measureClaimWaiting times claims of 10 jobs out of a runnable set of
// ungrouped jobs, first alone, then in a database where o.WaitingKeys keys
// of limit 1 are each at their limit (its admitted job claimed and
// committed, as a running job is) with a job waiting behind it, all
// enqueued before the runnable set, so that their jobs come first in the
// claim's order.
func (b *bench) measureClaimWaiting(ctx context.Context) error {
	const runnable, iterations = 10_000, 1_000
	measure := func(keys int) ([]time.Duration, error) {
		pool, _, cleanup, err := b.database(ctx, b.o.Conns)
		if err != nil {
			return nil, err
		}
		defer cleanup()
		if keys > 0 {
			if err := loadWaitingKeys(ctx, b, pool, keys); err != nil {
				return nil, err
			}
		}
		if err := enqueueNoops(ctx, pool, "bench", runnable, 0); err != nil {
			return nil, err
		}
		// What autovacuum does in time: the claims of the admitted jobs
		// leave dead claim index entries behind.
		if err := benchdb.New(pool).VacuumJobs(ctx); err != nil {
			return nil, err
		}
		b.say("claim with %d keys waiting: timing %d claims", keys, iterations)
		lat, err := claimTimes(ctx, pool, iterations)
		b.done()
		return lat, err
	}
	none, err := measure(0)
	if err != nil {
		return err
	}
	waiting, err := measure(b.o.WaitingKeys)
	if err != nil {
		return err
	}
	b.addClaimVersus(fmt.Sprintf("claim 10 jobs with %d limit keys at their limit, jobs waiting", b.o.WaitingKeys),
		runnable, waiting, none, "none waiting")
	return nil
}

// addClaimVersus adds the row of claims timed beside something (with)
// against the same claims without it (none, called so in the row): their
// p50 and p99, and the ratio of the p50s, with its target of 1.2x.
func (b *bench) addClaimVersus(label string, runnable int, with, none []time.Duration, noneIs string) {
	us := func(d time.Duration) string { return fmt.Sprintf("%.0fµs", float64(d.Nanoseconds())/1000) }
	p50, p50none := percentile(with, 0.5), percentile(none, 0.5)
	ratio := float64(p50) / float64(p50none)
	b.add(label, fmt.Sprintf("%d runnable", runnable),
		fmt.Sprintf("p50 %s, p99 %s (%.2fx %s: p50 %s, p99 %s)", us(p50), us(percentile(with, 0.99)), ratio,
			noneIs, us(p50none), us(percentile(none, 0.99))),
		0, "p50 <= 1.20x "+noneIs, ok(ratio <= 1.2))
}

// loadWaitingKeys enqueues two jobs for each of keys keys of limit 1 into
// queue "bench": the first is admitted, the second waits. Then it claims
// every admitted job (with a lease that outlasts the run) and commits, as
// workers that run them would, so that every key is at its limit.
func loadWaitingKeys(ctx context.Context, b *bench, pool *pgxpool.Pool, keys int) error {
	const chunk = 2_500 // keys per call
	for start := 0; start < keys; start += chunk {
		reqs := make([]pgtask.EnqueueRequest, 0, 2*chunk)
		for k := start; k < min(start+chunk, keys); k++ {
			key := "w" + strconv.Itoa(k)
			reqs = append(reqs, limitedNoop(2*k, key, 1), limitedNoop(2*k+1, key, 1))
		}
		if _, err := pgtask.EnqueueMany(ctx, pool, reqs); err != nil {
			return err
		}
		b.say("claim with %d keys waiting: loading %d/%d keys", keys, min(start+chunk, keys), keys)
	}
	if err := benchdb.New(pool).AnalyzeJobs(ctx); err != nil {
		return err
	}
	claimed := 0
	for claimed < keys {
		// A lease-mode claim takes the admitted jobs only; a held-mode one
		// would take the waiting ones behind them too, in runs.
		rows, err := gen.New(pool).ClaimLeasedJobs(ctx, gen.ClaimLeasedJobsParams{
			Queue: "bench", Max: 1_000, LeaseMs: time.Hour.Milliseconds(), RunMax: 1, Token: int64(claimed + 1)})
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return fmt.Errorf("claimed %d of the %d admitted jobs; no more to claim", claimed, keys)
		}
		claimed += len(rows)
		b.say("claim with %d keys waiting: %d/%d keys at their limit", keys, claimed, keys)
	}
	if claimed != keys {
		return fmt.Errorf("claimed %d jobs, want the %d admitted", claimed, keys)
	}
	return nil
}

// claimTimes times claims of 10 jobs, each rolled back so the backlog stays
// the same, and returns their sorted durations.
func claimTimes(ctx context.Context, pool *pgxpool.Pool, iterations int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, iterations)
	for range iterations {
		start := time.Now()
		tx, err := pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		rows, err := gen.New(tx).ClaimJobs(ctx, gen.ClaimJobsParams{Queue: "bench", Max: 10})
		if err == nil && len(rows) != 10 {
			err = fmt.Errorf("claimed %d jobs, want 10", len(rows))
		}
		if rerr := tx.Rollback(ctx); err == nil {
			err = rerr
		}
		if err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	return lat, nil
}
