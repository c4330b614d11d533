package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/tools/cmd/pgtask-bench/internal/benchdb"
)

// measureRetention shows that keeping finished jobs costs claims and drains
// nothing, and that retention deletes them faster than a worker finishes
// them. First, in a database with no finished jobs and then in one that
// keeps o.Retained (finished an hour ago, so the default retention keeps
// them), it times claims and a drain at the default Config. Then, with
// o.Expired jobs past their age, it drains again at the default Config,
// whose leader deletes expired jobs meanwhile, and compares the two rates.
func (b *bench) measureRetention(ctx context.Context) error {
	n := b.o.DefaultsJobs
	type figures struct {
		claim time.Duration
		drain float64
	}
	measure := func(retained int) (figures, error) {
		var f figures
		pool, url, cleanup, err := b.database(ctx, b.o.Conns)
		if err != nil {
			return f, err
		}
		defer cleanup()
		if err := loadFinished(ctx, b, pool, retained, time.Now().Add(-time.Hour)); err != nil {
			return f, err
		}
		label := fmt.Sprintf("retention: %d finished jobs kept", retained)
		b.say("%s: enqueueing %d jobs", label, n)
		if err := enqueueNoops(ctx, pool, "bench", n, 0); err != nil {
			return f, err
		}
		if f.claim, err = claimCost(ctx, pool, 1_000); err != nil {
			return f, err
		}
		r, err := b.drain(ctx, pool, url, "bench", drainSpec{label: label + ", defaults drain", n: n, unfinished: unfinishedUngrouped})
		if err != nil {
			return f, err
		}
		f.drain = rate(n, r.elapsed)
		return f, nil
	}
	none, err := measure(0)
	if err != nil {
		return err
	}
	kept, err := measure(b.o.Retained)
	if err != nil {
		return err
	}
	us := func(d time.Duration) string { return fmt.Sprintf("%.0fµs", float64(d.Nanoseconds())/1000) }
	b.add("claim 10 jobs, no finished jobs kept", "backlog "+fmt.Sprint(n), us(none.claim), 0, "", nil)
	b.add(fmt.Sprintf("claim 10 jobs, %d finished jobs kept", b.o.Retained), "backlog "+fmt.Sprint(n), us(kept.claim), 0,
		fmt.Sprintf("<= %s (1.25x without)", us(none.claim*5/4)), ok(kept.claim <= none.claim*5/4))
	b.add("defaults: drain ungrouped, no finished jobs kept", fmt.Sprintf("%d jobs", n), fmtRate(none.drain), none.drain, "", nil)
	b.add(fmt.Sprintf("defaults: drain ungrouped, %d finished jobs kept", b.o.Retained), fmt.Sprintf("%d jobs", n),
		fmtRate(kept.drain), kept.drain, fmt.Sprintf(">= %.0f jobs/s (0.8x without)", 0.8*none.drain), ok(kept.drain >= 0.8*none.drain))
	return b.measureRetentionRate(ctx, n)
}

// measureRetentionRate drains n jobs at the default Config with o.Expired
// finished jobs past the default retention age in the table, and counts
// how many of those the worker, as leader, deleted meanwhile.
func (b *bench) measureRetentionRate(ctx context.Context, n int) error {
	pool, url, cleanup, err := b.database(ctx, b.o.Conns)
	if err != nil {
		return err
	}
	defer cleanup()
	if err := loadFinished(ctx, b, pool, b.o.Expired, time.Now().Add(-48*time.Hour)); err != nil {
		return err
	}
	if err := enqueueNoops(ctx, pool, "bench", n, 0); err != nil {
		return err
	}
	cutoff := time.Now().Add(-24 * time.Hour)
	q := benchdb.New(pool)
	var mu sync.Mutex
	var left int64 = int64(b.o.Expired)
	sample := func(int64) {
		if c, err := q.CountFinishedBefore(ctx, cutoff); err == nil {
			mu.Lock()
			left = c
			mu.Unlock()
		}
	}
	label := fmt.Sprintf("retention: %d expired jobs, defaults drain", b.o.Expired)
	r, err := b.drain(ctx, pool, url, "bench", drainSpec{label: label, n: n, sample: sample, unfinished: unfinishedUngrouped})
	if err != nil {
		return err
	}
	sample(0)
	mu.Lock()
	deleted := int64(b.o.Expired) - left
	mu.Unlock()
	drained, retained := rate(n, r.elapsed), rate(int(deleted), r.elapsed)
	b.add("retention: expired jobs deleted during a defaults drain", fmt.Sprintf("%d expired", b.o.Expired),
		fmt.Sprintf("%d in %.1fs, %s", deleted, r.elapsed.Seconds(), fmtRate(retained)), 0,
		fmt.Sprintf(">= the drain's %s", fmtRate(drained)), ok(retained >= drained || left == 0))
	return nil
}

// loadFinished inserts n succeeded jobs that finished at at, in chunks,
// then vacuums the table as autovacuum would have.
func loadFinished(ctx context.Context, b *bench, pool *pgxpool.Pool, n int, at time.Time) error {
	const chunk = 1_000_000
	q := benchdb.New(pool)
	for done := 0; done < n; {
		c := min(chunk, n-done)
		if err := q.InsertFinishedJobs(ctx, benchdb.InsertFinishedJobsParams{FinishedAt: at, N: int32(c)}); err != nil {
			return err
		}
		done += c
		b.say("loading finished jobs: %d/%d", done, n)
	}
	if n > 0 {
		b.say("loading finished jobs: vacuum")
		if err := q.VacuumJobs(ctx); err != nil {
			return err
		}
		b.done()
	}
	return nil
}

func unfinishedUngrouped(ctx context.Context, pool *pgxpool.Pool, queue string) (int64, error) {
	return benchdb.New(pool).UnfinishedUngrouped(ctx, queue)
}
