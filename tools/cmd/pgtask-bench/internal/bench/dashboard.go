package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	pgtask "github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/dashboard"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-bench/internal/benchdb"
)

// dashboardPageTarget is the most a dashboard page may take, at the median,
// however many jobs the table holds.
const dashboardPageTarget = 100 * time.Millisecond

// measureDashboard times each page of the web dashboard over a table of
// DashboardJobs jobs: nine tenths finished over the last day (more than a
// page's counts read in the last hour), the rest waiting: queued in four
// queues, in 1,000 groups, and scheduled. It also times runtime.Stats,
// which `pgtask stats` shows and which counts every job, for comparison.
func (b *bench) measureDashboard(ctx context.Context) error {
	pool, _, cleanup, err := b.database(ctx, b.o.Conns)
	if err != nil {
		return err
	}
	defer cleanup()
	total := b.o.DashboardJobs
	if err := b.loadDashboardJobs(ctx, pool, total); err != nil {
		return err
	}
	failed, err := pgtask.ListJobs(ctx, pool, pgtask.JobFilter{Statuses: []pgtask.Status{pgtask.StatusFailed}}, 0, 1)
	if err != nil || len(failed) == 0 {
		return fmt.Errorf("find a failed job: %v (%d found)", err, len(failed))
	}
	h := dashboard.New(pool, dashboard.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		AllowedHosts: []string{"example.com"}}) // the host of httptest.NewRequest's requests
	size := fmt.Sprintf("%d jobs", total)
	for _, page := range []struct{ label, path string }{
		{"queues", "/"},
		{"jobs, newest first", "/jobs"},
		{"jobs of a queue, queued", "/jobs?queue=webhooks&status=queued"},
		{"jobs, failed", "/jobs?status=failed"},
		{"jobs, scheduled", "/jobs?status=scheduled"},
		{"jobs, a kind that matches none", "/jobs?kind=none"},
		{"a job", fmt.Sprintf("/jobs/%d", failed[0].ID)},
		{"groups, blocked", "/groups"},
		{"groups, all", "/groups?show=all"},
	} {
		p50, worst, err := timePage(ctx, h, page.path, 20)
		if err != nil {
			return fmt.Errorf("dashboard %s: %w", page.path, err)
		}
		b.say("dashboard %s: p50 %s", page.path, p50)
		b.add("dashboard: "+page.label+" (GET "+page.path+")", size, fmt.Sprintf("p50 %s, max %s", ms(p50), ms(worst)), 0,
			"p50 <= "+ms(dashboardPageTarget), ok(p50 <= dashboardPageTarget))
	}
	start := time.Now()
	if _, err := pgtask.Stats(ctx, pool); err != nil {
		return err
	}
	b.done()
	b.add("runtime.Stats (pgtask stats), for comparison", size, ms(time.Since(start)), 0, "", nil)
	return nil
}

// loadDashboardJobs fills the table: the finished jobs straight into it,
// then the waiting ones enqueued.
func (b *bench) loadDashboardJobs(ctx context.Context, pool *pgxpool.Pool, total int) error {
	waiting := total / 10
	b.say("dashboard: writing %d finished jobs", total-waiting)
	if err := benchdb.New(pool).InsertDashboardHistory(ctx, benchdb.InsertDashboardHistoryParams{
		N: int32(total - waiting), SpanSeconds: (24 * time.Hour).Seconds()}); err != nil {
		return err
	}
	queues := []string{"default", "emails", "reports", "webhooks"}
	const chunk = 5_000
	for start := 0; start < waiting; start += chunk {
		reqs := make([]pgtask.EnqueueRequest, 0, chunk)
		for i := start; i < min(start+chunk, waiting); i++ {
			r := pgtask.EnqueueRequest{Kind: fmt.Sprintf("kind%d", i%5), Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
			r.Queue = queues[i%4]
			switch {
			case i%4 == 2:
				r.Group = fmt.Sprintf("account-%d", i%1_000)
			case i%10 == 1:
				r.Delay = time.Duration(1+i%48) * time.Hour
			}
			reqs = append(reqs, r)
		}
		if _, err := pgtask.EnqueueMany(ctx, pool, reqs); err != nil {
			return err
		}
		b.say("dashboard: enqueued %d/%d waiting jobs", min(start+chunk, waiting), waiting)
	}
	return benchdb.New(pool).AnalyzeJobs(ctx)
}

// timePage gets path from h n times, after one request that warms the
// connections and plans, and returns the median and the slowest.
func timePage(ctx context.Context, h http.Handler, path string, n int) (p50, worst time.Duration, err error) {
	times := make([]time.Duration, 0, n)
	for i := range n + 1 {
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil)
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			return 0, 0, fmt.Errorf("status %d: %s", rec.Code, rec.Body.String())
		}
		if i > 0 {
			times = append(times, time.Since(start))
		}
	}
	slices.Sort(times)
	return times[len(times)/2], times[len(times)-1], nil
}
