// Package bench implements pgtask-bench.
package bench

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/gen"
	pgtask "github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-bench/internal/benchdb"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-bench/internal/benchtasks"
	"github.com/pgtask/pgtask/tools/internal/container"
	benchschema "github.com/pgtask/pgtask/tools/sql/bench/schema"
)

// Options sizes the run.
type Options struct {
	Only          string // comma-separated subset of: floor,enqueue,defaults,hotpinned,drain,wakeup,visible,commit,claim,limits,rates,fair,workflows,memory,retention,dashboard,steady
	Conns         int    // connections (runners, producers, floor clients)
	Batch         int    // jobs per claim in drains
	EnqueueSingle int
	EnqueueMany   int
	ManyBatch     int
	Ungrouped     int
	DefaultsJobs  int
	Grouped       int
	Groups        int
	Hot           int
	HotPinned     int // jobs in the single group drained while a transaction is held open
	WakeSamples   int
	ClaimBacklogs []int
	MemoryJobs    int
	Retained      int // finished jobs kept in the table for the retention measures
	Expired       int // finished jobs past their retention age for retention to delete
	DashboardJobs int
	// LimitKeys is how many keys of limit 2 the limits' drain spreads its
	// jobs over, against as many groups; WaitingKeys how many keys wait at
	// their limit while claims are timed.
	LimitKeys   int
	WaitingKeys int
	// The rate limit run: a key of Rate jobs a second worked for
	// RateDuration in each of RateModes.
	Rate         int
	RateDuration time.Duration
	RateModes    string
	// Fair queues: the flooding tenant's jobs, the newcomer's behind them,
	// and the tenants the fair drain spreads its jobs over.
	FairFlood    int
	FairNewcomer int
	FairTenants  int
	// Workflows: the fan-out's steps (beside one fan-in step), the chain's
	// steps, and the modes they run in.
	WorkflowFan   int
	WorkflowChain int
	WorkflowModes string
	FloorDuration time.Duration
	// The steady run: jobs a second offered for a duration to a worker of
	// that Concurrency, in each of the modes.
	SteadyRate        int
	SteadyDuration    time.Duration
	SteadyConcurrency int
	SteadyModes       string
	KeepDatabases     bool
	Markdown          bool // print the table as Markdown, for docs/benchmarks.md
}

func defaults() Options {
	return Options{
		Conns: 4, Batch: 250,
		EnqueueSingle: 20_000, EnqueueMany: 500_000, ManyBatch: 1_000,
		DefaultsJobs: 30_000, Ungrouped: 200_000, Grouped: 200_000, Groups: 1_000, Hot: 10_000, HotPinned: 100_000,
		WakeSamples: 300, ClaimBacklogs: []int{1_000, 100_000, 1_000_000},
		MemoryJobs: 1_000_000, Retained: 10_000_000, Expired: 1_000_000, DashboardJobs: 1_000_000,
		LimitKeys: 1_000, WaitingKeys: 100_000,
		Rate: 100, RateDuration: time.Minute, RateModes: "held,lease",
		FairFlood: 100_000, FairNewcomer: 100, FairTenants: 100,
		WorkflowFan: 10_000, WorkflowChain: 1_000, WorkflowModes: "held,lease",
		FloorDuration: 5 * time.Second,
		SteadyRate:    400, SteadyDuration: 10 * time.Minute, SteadyConcurrency: 32, SteadyModes: "held",
	}
}

// Main parses args, runs the benchmarks and prints the table. It returns the
// process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := defaults()
	fs := flag.NewFlagSet("pgtask-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Only, "only", "", "run only these, comma-separated: floor,enqueue,defaults,hotpinned,drain,wakeup,visible,commit,claim,limits,rates,fair,workflows,memory,retention,dashboard,steady")
	fs.IntVar(&o.Conns, "conns", o.Conns, "connections: worker runners, producers and floor clients")
	fs.IntVar(&o.Batch, "batch", o.Batch, "jobs per claim in the drains")
	fs.IntVar(&o.EnqueueSingle, "enqueue-single", o.EnqueueSingle, "jobs enqueued one per call")
	fs.IntVar(&o.EnqueueMany, "enqueue-many", o.EnqueueMany, "jobs enqueued with EnqueueMany")
	fs.IntVar(&o.ManyBatch, "many-batch", o.ManyBatch, "jobs per EnqueueMany call")
	fs.IntVar(&o.DefaultsJobs, "defaults-jobs", o.DefaultsJobs, "jobs in each drain at the default Config (the single group's: a tenth)")
	fs.IntVar(&o.Ungrouped, "ungrouped", o.Ungrouped, "jobs in the ungrouped drain")
	fs.IntVar(&o.Grouped, "grouped", o.Grouped, "jobs in the grouped drain")
	fs.IntVar(&o.Groups, "groups", o.Groups, "groups in the grouped drain")
	fs.IntVar(&o.Hot, "hot", o.Hot, "jobs in the single-group drain")
	fs.IntVar(&o.HotPinned, "hot-pinned", o.HotPinned, "jobs in the single-group drain with a transaction held open, first 10s against last")
	fs.IntVar(&o.WakeSamples, "wake-samples", o.WakeSamples, "enqueues timed for the wake-up latency")
	backlogs := fs.String("claim-backlogs", "1000,100000,1000000", "backlog sizes for the claim cost")
	fs.IntVar(&o.MemoryJobs, "memory-jobs", o.MemoryJobs, "jobs drained while watching the worker's memory")
	fs.IntVar(&o.Retained, "retained", o.Retained, "finished jobs kept in the table while claims and a drain are timed")
	fs.IntVar(&o.Expired, "expired", o.Expired, "finished jobs past their age that retention deletes during a drain")
	fs.IntVar(&o.LimitKeys, "limit-keys", o.LimitKeys, "keys of limit 2 in the limits' drain (against as many groups)")
	fs.IntVar(&o.WaitingKeys, "waiting-keys", o.WaitingKeys, "keys at their limit with a job waiting while claims are timed")
	fs.IntVar(&o.Rate, "rate", o.Rate, "jobs a second of the rate limit run's key")
	fs.DurationVar(&o.RateDuration, "rate-duration", o.RateDuration, "how long the rate limit run works its key's backlog")
	fs.StringVar(&o.RateModes, "rate-modes", o.RateModes, "the rate limit run's modes, comma-separated: held,lease (empty: none)")
	fs.IntVar(&o.FairFlood, "fair-flood", o.FairFlood, "jobs tenant a enqueues into a fair queue before tenant b's")
	fs.IntVar(&o.FairNewcomer, "fair-newcomer", o.FairNewcomer, "jobs tenant b enqueues behind tenant a's")
	fs.IntVar(&o.FairTenants, "fair-tenants", o.FairTenants, "tenants the fair queue's drain spreads its jobs over")
	fs.IntVar(&o.WorkflowFan, "workflow-fan", o.WorkflowFan, "steps of the workflow fan-out, beside its one fan-in step")
	fs.IntVar(&o.WorkflowChain, "workflow-chain", o.WorkflowChain, "steps of the workflow chain")
	fs.StringVar(&o.WorkflowModes, "workflow-modes", o.WorkflowModes, "the workflow runs' modes, comma-separated: held,lease (empty: none)")
	fs.IntVar(&o.DashboardJobs, "dashboard-jobs", o.DashboardJobs, "jobs in the table while the dashboard's pages are timed")
	fs.DurationVar(&o.FloorDuration, "floor-duration", o.FloorDuration, "how long to measure the UPDATE floor")
	fs.IntVar(&o.SteadyRate, "steady-rate", o.SteadyRate, "jobs a second offered in the steady run")
	fs.DurationVar(&o.SteadyDuration, "steady-duration", o.SteadyDuration, "how long the steady run offers jobs")
	fs.IntVar(&o.SteadyConcurrency, "steady-concurrency", o.SteadyConcurrency, "the steady run's queue Concurrency")
	fs.StringVar(&o.SteadyModes, "steady-modes", o.SteadyModes, "the steady run's modes, comma-separated: held,lease")
	fs.BoolVar(&o.KeepDatabases, "keep", false, "keep the benchmark databases")
	fs.BoolVar(&o.Markdown, "markdown", false, "print the table as Markdown, as docs/benchmarks.md keeps it")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	o.ClaimBacklogs = nil
	for _, s := range strings.Split(*backlogs, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil || n < 10 {
			fmt.Fprintf(stderr, "pgtask-bench: -claim-backlogs: %q is not a number of at least 10\n", s)
			return 2
		}
		o.ClaimBacklogs = append(o.ClaimBacklogs, n)
	}
	if err := run(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "pgtask-bench:", err)
		return 1
	}
	return 0
}

type row struct {
	name, size, value, ratio, target, verdict string
}

type bench struct {
	o        Options
	server   *pgtasktest.Server
	progress io.Writer
	rows     []row
	floor    float64 // single-row UPDATE transactions per second
	quiet    *slog.Logger
	tty      bool
	lastSaid time.Time
	pending  string
}

func run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	server, err := pgtasktest.Discover(ctx, pgtasktest.DiscoverOptions{
		EnvVars:  []string{"DATABASE_URL"},
		Starters: []pgtasktest.Starter{container.Starter()},
		Logf:     func(f string, a ...any) { fmt.Fprintf(stderr, f+"\n", a...) },
	})
	if err != nil {
		return err
	}
	defer server.Close()
	b := &bench{o: o, server: server, progress: stderr, tty: isTerminal(stderr),
		quiet: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	want := func(name string) bool {
		return o.Only == "" || slices.Contains(strings.Split(o.Only, ","), name)
	}
	fmt.Fprintf(stderr, "pgtask-bench on %s: %d connections, batches of %d, GOMAXPROCS %d\n",
		redact(server.URL), o.Conns, o.Batch, runtime.GOMAXPROCS(0))
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"floor", b.measureFloor},
		{"enqueue", b.measureEnqueue},
		{"defaults", b.measureDefaults},
		{"hotpinned", b.measureHotPinned},
		{"drain", b.measureDrains},
		{"wakeup", b.measureWakeup},
		{"visible", b.measureVisible},
		{"commit", b.measureCommitDelay},
		{"claim", b.measureClaim},
		{"limits", b.measureLimits},
		{"rates", b.measureRates},
		{"fair", b.measureFair},
		{"workflows", b.measureWorkflows},
		{"memory", b.measureMemory},
		{"retention", b.measureRetention},
		{"dashboard", b.measureDashboard},
		{"steady", b.measureSteady},
	}
	for _, s := range steps {
		if !want(s.name) {
			continue
		}
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	fmt.Fprintln(stderr)
	if o.Markdown {
		return b.markdown(stdout)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "measure\tsize\tresult\tvs floor\ttarget\t")
	for _, r := range b.rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s %s\t\n", r.name, r.size, r.value, r.ratio, r.target, r.verdict)
	}
	return tw.Flush()
}

// markdown prints the rows as a Markdown table, headed by the floor.
func (b *bench) markdown(w io.Writer) error {
	cell := func(s string) string { return strings.ReplaceAll(s, "|", "\\|") }
	var sb strings.Builder
	if b.floor > 0 {
		fmt.Fprintf(&sb, "Floor: %.0f single-row UPDATE transactions per second.\n\n", b.floor)
	}
	sb.WriteString("| measure | size | result | vs floor | target | |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, r := range b.rows {
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s |\n", cell(r.name), cell(r.size), cell(r.value), r.ratio, cell(r.target), r.verdict)
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// redact hides the passwords of the server's connection string.
func redact(url string) string {
	return pgtask.RedactDSN(url)
}

// say shows progress: one line rewritten in place on a terminal, a line
// every few seconds otherwise.
func (b *bench) say(format string, args ...any) {
	if b.tty {
		fmt.Fprintf(b.progress, "\r\033[K"+format, args...)
		return
	}
	b.pending = fmt.Sprintf(format, args...)
	if time.Since(b.lastSaid) >= 3*time.Second {
		fmt.Fprintln(b.progress, b.pending)
		b.lastSaid, b.pending = time.Now(), ""
	}
}

// done ends a measurement's progress with its last line.
func (b *bench) done() {
	switch {
	case b.tty:
		fmt.Fprintln(b.progress)
	case b.pending != "":
		fmt.Fprintln(b.progress, b.pending)
		b.pending = ""
	}
	b.lastSaid = time.Time{}
}

func (b *bench) add(name, size, value string, perSec float64, target string, met *bool) {
	r := row{name: name, size: size, value: value, target: target}
	if perSec > 0 && b.floor > 0 {
		r.ratio = fmt.Sprintf("%.2fx", perSec/b.floor)
	}
	if met != nil {
		r.verdict = map[bool]string{true: "met", false: "MISSED"}[*met]
	}
	b.rows = append(b.rows, r)
}

// database creates a fresh migrated database and returns a pool on it and a
// cleanup.
func (b *bench) database(ctx context.Context, conns int) (*pgxpool.Pool, string, func(), error) {
	url, err := pgtasktest.CreateDatabase(ctx, b.server.URL, "")
	if err != nil {
		return nil, "", nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, "", nil, err
	}
	cfg.MaxConns = int32(max(conns, 4))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, "", nil, err
	}
	if _, err := pgtask.Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, "", nil, err
	}
	cleanup := func() {
		pool.Close()
		if !b.o.KeepDatabases {
			pgtasktest.DropDatabase(context.WithoutCancel(ctx), b.server.URL, url) //nolint:errcheck // best effort
		}
	}
	return pool, url, cleanup, nil
}

func rate(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

func fmtRate(r float64) string { return fmt.Sprintf("%.0f jobs/s", r) }

func ok(v bool) *bool { return &v }

// enqueueNoops fills a queue fast, for the drains.
func enqueueNoops(ctx context.Context, pool *pgxpool.Pool, queue string, n, groups int) error {
	const chunk = 5_000
	for start := 0; start < n; start += chunk {
		end := min(start+chunk, n)
		if groups == 0 {
			ts := make([]benchtasks.Noop, 0, end-start)
			for i := start; i < end; i++ {
				ts = append(ts, benchtasks.Noop{N: i})
			}
			if _, err := benchtasks.EnqueueNoopMany(ctx, pool, ts, pgtask.WithQueue(queue)); err != nil {
				return err
			}
			continue
		}
		ts := make([]benchtasks.GroupedNoop, 0, end-start)
		for i := start; i < end; i++ {
			ts = append(ts, benchtasks.GroupedNoop{Group: i % groups, N: i})
		}
		if _, err := benchtasks.EnqueueGroupedNoopMany(ctx, pool, ts, pgtask.WithQueue(queue)); err != nil {
			return err
		}
	}
	return benchdb.New(pool).AnalyzeJobs(ctx)
}

// drainSpec says how a drain runs.
type drainSpec struct {
	label string
	n     int
	qc    pgtask.QueueConfig
	// sleep is how long each handler sleeps: 0 for no-op handlers.
	sleep  time.Duration
	sample func(done int64)
	// trace, when set, is called at every check of the progress, from the
	// worker's start on: the time since then and the jobs handled.
	trace func(at time.Duration, done int64)
	// wakeSamples, when above 0, has the worker, once the drain is done,
	// wait idle for that many single jobs and time each from enqueue to
	// handler start.
	wakeSamples int
	// unfinished counts the queue's unfinished jobs, to tell when the last
	// commits are visible; default unfinishedJobs.
	unfinished func(ctx context.Context, pool *pgxpool.Pool, queue string) (int64, error)
}

// drainResult is what a drain measured.
type drainResult struct {
	elapsed time.Duration
	// conns is the most connections the worker's pool may open.
	conns int32
	// wake holds the sorted wake-up latencies, if asked for.
	wake []time.Duration
}

// drain works d.n queued jobs of queue with a worker and returns how long it
// took from the worker's start until the last job's commit was visible.
func (b *bench) drain(ctx context.Context, pool *pgxpool.Pool, url, queue string, d drainSpec) (drainResult, error) {
	var res drainResult
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return res, err
	}
	w, err := pgtask.NewWorker(ctx, cfg, pgtask.Config{
		Queues: map[string]pgtask.QueueConfig{queue: d.qc},
		Logger: b.quiet,
	})
	if err != nil {
		return res, err
	}
	defer w.Close()
	res.conns = w.Pool().Stat().MaxConns()
	var handled atomic.Int64
	started := make(chan time.Time, 1)
	var waking atomic.Bool
	work := func() {
		if d.sleep > 0 {
			time.Sleep(d.sleep)
		}
		if waking.Load() {
			started <- time.Now()
		}
		handled.Add(1)
	}
	count := func(context.Context, *pgtask.Job, benchtasks.Noop) error { work(); return nil }
	countGrouped := func(context.Context, *pgtask.Job, benchtasks.GroupedNoop) error { work(); return nil }
	if err := benchtasks.HandleNoop(w, count); err != nil {
		return res, err
	}
	if err := benchtasks.HandleGroupedNoop(w, countGrouped); err != nil {
		return res, err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var runErr error
	start := time.Now()
	wg.Go(func() { runErr = w.Run(runCtx) })
	defer func() { stop(); wg.Wait() }()

	// Checked often, so a short drain's end is not rounded up; reported
	// every 250ms.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for ticks := 1; handled.Load() < int64(d.n); ticks++ {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
		}
		if d.trace != nil {
			d.trace(time.Since(start), handled.Load())
		}
		if ticks%50 != 0 {
			continue
		}
		done := handled.Load()
		b.say("%s: %d/%d jobs, %.0f jobs/s", d.label, done, d.n, rate(int(done), time.Since(start)))
		if d.sample != nil {
			d.sample(done)
		}
	}
	// Handlers have run; wait until the last commits are visible.
	countUnfinished := d.unfinished
	if countUnfinished == nil {
		countUnfinished = unfinishedJobs
	}
	for {
		unfinished, err := countUnfinished(ctx, pool, queue)
		if err != nil {
			return res, err
		}
		if unfinished == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	res.elapsed = time.Since(start)
	b.say("%s: %d jobs in %.2fs, %.0f jobs/s", d.label, d.n, res.elapsed.Seconds(), rate(d.n, res.elapsed))
	if d.wakeSamples > 0 {
		waking.Store(true)
		if res.wake, err = wakeups(ctx, pool, queue, d.wakeSamples, started); err != nil {
			return res, err
		}
	}
	b.done()
	stop()
	wg.Wait()
	return res, runErr
}

// wakeups enqueues n jobs one at a time into queue, each once the worker
// is idle, and returns the sorted times from enqueue to handler start.
func wakeups(ctx context.Context, pool *pgxpool.Pool, queue string, n int, started <-chan time.Time) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	for i := range n {
		time.Sleep(20 * time.Millisecond) // let the worker go idle
		at := time.Now()
		if _, err := benchtasks.EnqueueNoop(ctx, pool, benchtasks.Noop{N: i}, pgtask.WithQueue(queue)); err != nil {
			return nil, err
		}
		select {
		case s := <-started:
			lat = append(lat, s.Sub(at))
		case <-time.After(10 * time.Second):
			return nil, fmt.Errorf("sample %d: the idle worker did not start the job within 10s", i)
		}
	}
	slices.Sort(lat)
	return lat, nil
}

// waitFinished waits until queue has no unfinished job, saying every
// interval how many of its n are done ("label: done/n what, s").
func (b *bench) waitFinished(ctx context.Context, pool *pgxpool.Pool, queue, label, what string, n int, every time.Duration) error {
	start := time.Now()
	for {
		left, err := unfinishedJobs(ctx, pool, queue)
		if err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		b.say("%s: %d/%d %s, %.0f s", label, int64(n)-left, n, what, time.Since(start).Seconds())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// percentile of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func unfinishedJobs(ctx context.Context, pool *pgxpool.Pool, queue string) (int64, error) {
	counts, err := benchdb.New(pool).JobsByStatus(ctx, queue)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, c := range counts {
		if !pgtask.Status(c.Status).Finished() {
			n += c.Jobs
		}
	}
	return n, nil
}

// measureDefaults drains with the Config a user gets without tuning, in
// each mode: the figures that are the product's. Targets are ratios to the
// floor of the same run. Then lease mode with sleeping handlers, and both
// modes while another session keeps a transaction open.
func (b *bench) measureDefaults(ctx context.Context) error {
	n := b.o.DefaultsJobs
	lease := pgtask.QueueConfig{Mode: pgtask.ModeLease}
	single := pgtask.QueueConfig{BatchSize: 1}
	// The drains' names, shared by the rows with a transaction held open,
	// which look up the rate of the same drain without it by its label.
	const ungrouped, hot = "drain ungrouped", "drain 1 hot group (serial)"
	groups := fmt.Sprintf("drain %d groups (FIFO)", b.o.Groups)
	cases := []struct {
		label  string
		n      int
		groups int
		qc     pgtask.QueueConfig
		ratio  float64
	}{
		{"defaults: " + ungrouped, n, 0, pgtask.QueueConfig{}, 3},
		{"defaults: " + groups, n, b.o.Groups, pgtask.QueueConfig{}, 1.5},
		{"defaults: " + hot, n / 10, 1, pgtask.QueueConfig{}, 1},
		{"lease defaults: " + ungrouped, n, 0, lease, 3},
		{"lease defaults: " + groups, n, b.o.Groups, lease, 1.5},
		{"lease defaults: " + hot, n / 10, 1, lease, 0.5},
		// One job per claim and commit: a choice, with no target.
		{"held, BatchSize 1: " + ungrouped, n, 0, single, 0},
		{"held, BatchSize 1: " + groups, n, b.o.Groups, single, 0},
		{"held, BatchSize 1: " + hot, n / 10, 1, single, 0},
	}
	rates := map[string]float64{}
	for _, c := range cases {
		r, err := b.drainBacklog(ctx, c.groups, false, drainSpec{label: c.label, n: c.n, qc: c.qc})
		if err != nil {
			return err
		}
		rates[c.label] = rate(c.n, r.elapsed)
		b.addRatio(c.label, fmt.Sprintf("%d jobs", c.n), rates[c.label], c.ratio)
	}

	// I/O-bound handlers: 20ms each, 500 at once, in lease mode.
	noop := rates["lease defaults: "+ungrouped]
	label := "lease: 20ms handlers, Concurrency 500"
	r, err := b.drainBacklog(ctx, 0, false, drainSpec{label: label, n: n, sleep: 20 * time.Millisecond,
		qc: pgtask.QueueConfig{Mode: pgtask.ModeLease, Concurrency: 500}})
	if err != nil {
		return err
	}
	got := rate(n, r.elapsed)
	b.add(label, fmt.Sprintf("%d jobs", n), fmt.Sprintf("%s on %d conns", fmtRate(got), r.conns), got,
		fmt.Sprintf(">= %.0f jobs/s (0.8x lease no-op) on <= 10 conns", 0.8*noop), ok(got >= 0.8*noop && r.conns <= 10))

	// Another session holds a transaction open for the whole drain, so
	// nothing that dies meanwhile can be cleaned up; then the idle worker's
	// wake-up is timed with the dead rows still there. Grouped drains run
	// so too, many groups and a single busy one: a group's rows change
	// with every job it runs.
	for _, c := range []struct {
		label, base string
		n, groups   int
		qc          pgtask.QueueConfig
	}{
		{"defaults, transaction held open: " + ungrouped, "defaults: " + ungrouped, n, 0, pgtask.QueueConfig{}},
		{"lease, transaction held open: " + ungrouped, "lease defaults: " + ungrouped, n, 0, lease},
		{"defaults, transaction held open: " + groups, "defaults: " + groups, n, b.o.Groups, pgtask.QueueConfig{}},
		{"lease, transaction held open: " + groups, "lease defaults: " + groups, n, b.o.Groups, lease},
		{"defaults, transaction held open: " + hot, "defaults: " + hot, n / 10, 1, pgtask.QueueConfig{}},
		{"lease, transaction held open: " + hot, "lease defaults: " + hot, n / 10, 1, lease},
	} {
		d := drainSpec{label: c.label, n: c.n, qc: c.qc}
		if c.groups == 0 {
			d.wakeSamples = b.o.WakeSamples / 3
		}
		r, err := b.drainBacklog(ctx, c.groups, true, d)
		if err != nil {
			return err
		}
		got, base := rate(c.n, r.elapsed), rates[c.base]
		b.add(c.label, fmt.Sprintf("%d jobs", c.n), fmtRate(got), got,
			fmt.Sprintf(">= %.0f jobs/s (0.8x the same without)", 0.8*base), ok(got >= 0.8*base))
		if c.groups != 0 {
			continue
		}
		p99 := percentile(r.wake, 0.99)
		b.add(strings.Replace(c.label, ungrouped, "wake-up after it", 1), fmt.Sprintf("%d samples", len(r.wake)),
			fmt.Sprintf("p50 %s, p99 %s", ms(percentile(r.wake, 0.5)), ms(p99)), 0, "p99 < 100ms", ok(p99 < 100*time.Millisecond))
	}
	return nil
}

// measureHotPinned drains one group of many jobs while another session
// holds a transaction open, in each mode at the default Config, and
// compares the rate of the last 10 seconds with that of the first 10: a
// group's work must not cost more the more of it has run while nothing it
// leaves behind can be cleaned up.
func (b *bench) measureHotPinned(ctx context.Context) error {
	const window = 10 * time.Second
	for _, c := range []struct {
		label string
		qc    pgtask.QueueConfig
	}{
		{"defaults: hot group, transaction held open", pgtask.QueueConfig{}},
		{"lease: hot group, transaction held open", pgtask.QueueConfig{Mode: pgtask.ModeLease}},
	} {
		n := b.o.HotPinned
		type point struct {
			at   time.Duration
			done int64
		}
		var points []point
		trace := func(at time.Duration, done int64) { points = append(points, point{at, done}) }
		r, err := b.drainBacklog(ctx, 1, true, drainSpec{label: c.label, n: n, qc: c.qc, trace: trace})
		if err != nil {
			return err
		}
		// The jobs handled by a time, from the last check at or before it.
		doneAt := func(t time.Duration) int64 {
			i, _ := slices.BinarySearchFunc(points, t, func(p point, t time.Duration) int { return cmp.Compare(p.at, t) })
			if i < len(points) && points[i].at == t {
				return points[i].done
			}
			if i == 0 {
				return 0
			}
			return points[i-1].done
		}
		// The drain ends when the last handler has run: the last check.
		end := points[len(points)-1].at
		first := float64(doneAt(window)) / window.Seconds()
		last := float64(int64(n)-doneAt(end-window)) / window.Seconds()
		size := fmt.Sprintf("%d jobs", n)
		if end < 2*window {
			size += fmt.Sprintf(" (%.0fs: windows overlap)", end.Seconds())
		}
		ratio := last / first
		b.add(c.label+": last 10s vs first 10s", size,
			fmt.Sprintf("%.2fx (%s then %s; %s overall)", ratio, fmtRate(first), fmtRate(last), fmtRate(rate(n, r.elapsed))),
			0, ">= 0.80x", ok(ratio >= 0.8))
	}
	return nil
}

// addRatio adds a drain's row with a target as a ratio to the floor, or
// none for a ratio of 0.
func (b *bench) addRatio(label, size string, r, ratio float64) {
	target, met := fmt.Sprintf(">= %.2fx floor", ratio), (*bool)(nil)
	switch {
	case ratio == 0:
		target = "none (a setting, not the default)"
	case b.floor > 0:
		met = ok(r >= ratio*b.floor)
	default:
		target += " (no floor measured)"
	}
	b.add(label, size, fmtRate(r), r, target, met)
}

// drainBacklog enqueues d.n no-op jobs over groups groups (0: ungrouped) in
// a fresh database and drains them; with pinned, another session holds a
// transaction open from before the drain until after it.
func (b *bench) drainBacklog(ctx context.Context, groups int, pinned bool, d drainSpec) (drainResult, error) {
	return b.drainWith(ctx, pinned, d, func(ctx context.Context, pool *pgxpool.Pool) error {
		return enqueueNoops(ctx, pool, "bench", d.n, groups)
	})
}

// drainWith is drainBacklog with the d.n jobs of queue "bench" enqueued by
// load.
func (b *bench) drainWith(ctx context.Context, pinned bool, d drainSpec, load func(context.Context, *pgxpool.Pool) error) (drainResult, error) {
	pool, url, cleanup, err := b.database(ctx, b.o.Conns)
	if err != nil {
		return drainResult{}, err
	}
	defer cleanup()
	b.say("%s: enqueueing %d jobs", d.label, d.n)
	if err := load(ctx, pool); err != nil {
		return drainResult{}, err
	}
	if pinned {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return drainResult{}, err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // it only read
		if _, err := benchdb.New(tx).PinHorizon(ctx); err != nil {
			return drainResult{}, err
		}
	}
	return b.drain(ctx, pool, url, "bench", d)
}

func (b *bench) measureDrains(ctx context.Context) error {
	type drainCase struct {
		label, size string
		n, groups   int
		qc          pgtask.QueueConfig
		target      float64
	}
	cases := []drainCase{
		{"drain ungrouped", fmt.Sprintf("%d jobs", b.o.Ungrouped), b.o.Ungrouped, 0,
			pgtask.QueueConfig{Concurrency: b.o.Conns, BatchSize: b.o.Batch}, 27_000},
		{fmt.Sprintf("drain %d groups (FIFO)", b.o.Groups), fmt.Sprintf("%d jobs", b.o.Grouped), b.o.Grouped, b.o.Groups,
			pgtask.QueueConfig{Concurrency: b.o.Conns, BatchSize: b.o.Batch}, 10_000},
		{"drain 1 hot group (serial)", fmt.Sprintf("%d jobs", b.o.Hot), b.o.Hot, 1,
			pgtask.QueueConfig{Concurrency: 2, BatchSize: b.o.Batch}, 1_500},
	}
	for _, c := range cases {
		res, err := b.drainBacklog(ctx, c.groups, false, drainSpec{label: c.label, n: c.n, qc: c.qc})
		if err != nil {
			return err
		}
		r := rate(c.n, res.elapsed)
		b.add(c.label, c.size, fmtRate(r), r, fmt.Sprintf(">= %.0f jobs/s", c.target), ok(r >= c.target))
	}
	return nil
}

func (b *bench) measureEnqueue(ctx context.Context) error {
	pool, _, cleanup, err := b.database(ctx, b.o.Conns)
	if err != nil {
		return err
	}
	defer cleanup()

	// One job per call, from several goroutines: each call is a round trip
	// and a commit.
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, b.o.Conns)
	for range b.o.Conns {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.o.EnqueueSingle) {
					return
				}
				if _, err := benchtasks.EnqueueNoop(ctx, pool, benchtasks.Noop{N: int(i)}, pgtask.WithQueue("single")); err != nil {
					errs <- err
					return
				}
				if i%1000 == 0 {
					b.say("enqueue single: %d/%d", i, b.o.EnqueueSingle)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	d := time.Since(start)
	b.done()
	r := rate(b.o.EnqueueSingle, d)
	b.addRatio(fmt.Sprintf("EnqueueNoop, %d goroutines", b.o.Conns), fmt.Sprintf("%d jobs", b.o.EnqueueSingle), r, 0.8)

	// Batches, from one goroutine and then from Conns goroutines at once.
	for _, producers := range []int{1, b.o.Conns} {
		var sent atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, producers)
		for range producers {
			wg.Go(func() {
				batch := make([]benchtasks.GroupedNoop, b.o.ManyBatch)
				for {
					done := int(sent.Add(int64(len(batch)))) - len(batch)
					if done >= b.o.EnqueueMany {
						return
					}
					for i := range batch {
						batch[i] = benchtasks.GroupedNoop{Group: (done + i) % 1000, N: done + i}
					}
					if _, err := benchtasks.EnqueueGroupedNoopMany(ctx, pool, batch, pgtask.WithQueue("many")); err != nil {
						errs <- err
						return
					}
					if done%(20*b.o.ManyBatch) == 0 {
						b.say("enqueue many, %d goroutines: %d/%d", producers, done, b.o.EnqueueMany)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
		d := time.Since(start)
		b.done()
		n := (b.o.EnqueueMany + b.o.ManyBatch - 1) / b.o.ManyBatch * b.o.ManyBatch
		r := rate(n, d)
		b.addRatio(fmt.Sprintf("EnqueueGroupedNoopMany, batches of %d, %d goroutines", b.o.ManyBatch, producers), fmt.Sprintf("%d jobs", n),
			r, 10)
	}
	return nil
}

// measureWakeup times, in each mode, an idle worker's start of a lone job
// from the call that enqueues it: only a notification wakes the worker
// (PollInterval is a minute).
func (b *bench) measureWakeup(ctx context.Context) error {
	for _, mode := range []pgtask.Mode{pgtask.ModeHeld, pgtask.ModeLease} {
		if err := b.wakeup(ctx, mode); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) wakeup(ctx context.Context, mode pgtask.Mode) error {
	pool, url, cleanup, err := b.database(ctx, b.o.Conns)
	if err != nil {
		return err
	}
	defer cleanup()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	w, err := pgtask.NewWorker(ctx, cfg, pgtask.Config{
		Queues:       map[string]pgtask.QueueConfig{"wake": {Mode: mode, Concurrency: 2}},
		PollInterval: time.Minute, // only notifications wake it
		Logger:       b.quiet,
	})
	if err != nil {
		return err
	}
	defer w.Close()
	started := make(chan time.Time, 1)
	if err := benchtasks.HandleNoop(w, func(context.Context, *pgtask.Job, benchtasks.Noop) error {
		started <- time.Now()
		return nil
	}); err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(runCtx) }) //nolint:errcheck // Run returns nil
	defer func() { stop(); wg.Wait() }()
	time.Sleep(500 * time.Millisecond) // listening and idle

	lat := make([]time.Duration, 0, b.o.WakeSamples)
	for i := range b.o.WakeSamples {
		at := time.Now()
		if _, err := benchtasks.EnqueueNoop(ctx, pool, benchtasks.Noop{N: i}, pgtask.WithQueue("wake")); err != nil {
			return err
		}
		select {
		case s := <-started:
			lat = append(lat, s.Sub(at))
		case <-time.After(10 * time.Second):
			return fmt.Errorf("%s, sample %d: the idle worker did not start the job within 10s", mode, i)
		}
		time.Sleep(20 * time.Millisecond) // let the worker go idle again
		if i%20 == 0 {
			b.say("wake-up latency, %s: %d/%d", mode, i, b.o.WakeSamples)
		}
	}
	b.done()
	slices.Sort(lat)
	p := func(q float64) time.Duration { return percentile(lat, q) }
	b.add(fmt.Sprintf("wake-up, %s: enqueue to handler start", mode), fmt.Sprintf("%d samples", len(lat)),
		fmt.Sprintf("p50 %s, p95 %s, p99 %s", ms(p(0.50)), ms(p(0.95)), ms(p(0.99))), 0, "p50 <= 5ms, p99 <= 10ms",
		ok(p(0.50) <= 5*time.Millisecond && p(0.99) <= 10*time.Millisecond))
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }

func (b *bench) measureClaim(ctx context.Context) error {
	pool, _, cleanup, err := b.database(ctx, b.o.Conns)
	if err != nil {
		return err
	}
	defer cleanup()
	const iterations = 1_000
	loaded := 0
	var first time.Duration
	for i, backlog := range b.o.ClaimBacklogs {
		for loaded < backlog {
			n := min(backlog-loaded, 10_000)
			ts := make([]benchtasks.GroupedNoop, n)
			for j := range ts {
				ts[j] = benchtasks.GroupedNoop{Group: (loaded + j) % 10_000, N: loaded + j}
			}
			if _, err := benchtasks.EnqueueGroupedNoopMany(ctx, pool, ts); err != nil {
				return err
			}
			loaded += n
			b.say("claim cost: loading backlog %d/%d", loaded, backlog)
		}
		if err := benchdb.New(pool).AnalyzeJobs(ctx); err != nil {
			return err
		}
		per, err := claimCost(ctx, pool, iterations)
		if err != nil {
			return err
		}
		if i == 0 {
			first = per
		}
		b.say("claim cost at backlog %d: %s per claim of 10", backlog, per)
		b.done()
		target, verdict := "", (*bool)(nil)
		if i > 0 {
			target = "<= 2x the smallest backlog's"
			verdict = ok(per <= 2*first)
		}
		b.add("claim 10 jobs (begin, claim, rollback)", fmt.Sprintf("backlog %d", backlog),
			fmt.Sprintf("%.0fµs", float64(per.Nanoseconds())/1000), 0, target, verdict)
	}
	return nil
}

// claimCost times claims of 10 jobs, each rolled back so the backlog stays
// the same, and returns the mean.
func claimCost(ctx context.Context, pool *pgxpool.Pool, iterations int) (time.Duration, error) {
	start := time.Now()
	for range iterations {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		rows, err := gen.New(tx).ClaimJobs(ctx, gen.ClaimJobsParams{Queue: "bench", Max: 10})
		if err == nil && len(rows) != 10 {
			err = fmt.Errorf("claimed %d jobs, want 10", len(rows))
		}
		if rerr := tx.Rollback(ctx); err == nil {
			err = rerr
		}
		if err != nil {
			return 0, err
		}
	}
	return time.Since(start) / time.Duration(iterations), nil
}

func (b *bench) measureMemory(ctx context.Context) error {
	pool, url, cleanup, err := b.database(ctx, b.o.Conns)
	if err != nil {
		return err
	}
	defer cleanup()
	b.say("memory: enqueueing %d jobs", b.o.MemoryJobs)
	if err := enqueueNoops(ctx, pool, "bench", b.o.MemoryJobs, 0); err != nil {
		return err
	}
	runtime.GC()
	var early, peak, last uint64
	sample := func(done int64) {
		rss := rssBytes()
		if early == 0 && done >= int64(b.o.MemoryJobs/10) {
			early = rss
		}
		peak = max(peak, rss)
		last = rss
	}
	res, err := b.drain(ctx, pool, url, "bench", drainSpec{label: "memory", n: b.o.MemoryJobs,
		qc: pgtask.QueueConfig{Concurrency: b.o.Conns, BatchSize: b.o.Batch}, sample: sample})
	elapsed := res.elapsed
	if err != nil {
		return err
	}
	if early == 0 {
		early = last
	}
	flat := last <= early+early/2 // the tail no more than 50% above the level after the first tenth
	b.add(fmt.Sprintf("worker RSS over a drain (%.0f jobs/s)", rate(b.o.MemoryJobs, elapsed)), fmt.Sprintf("%d jobs", b.o.MemoryJobs),
		fmt.Sprintf("%s at 10%%, %s peak, %s at end", mib(early), mib(peak), mib(last)), 0, "flat", ok(flat))
	return nil
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// rssBytes reads this process's resident set size.
func rssBytes() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.Sys
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb uint64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}

// measureFloor runs single-row UPDATE transactions from Conns clients, each
// on its own row, for FloorDuration: every drain is also shown as a ratio to
// this rate, the price of a commit on this machine.
func (b *bench) measureFloor(ctx context.Context) error {
	pool, _, cleanup, err := b.database(ctx, b.o.Conns)
	if err != nil {
		return err
	}
	defer cleanup()
	if _, err := pool.Exec(ctx, benchschema.SQL); err != nil {
		return fmt.Errorf("create bench tables: %w", err)
	}
	q := benchdb.New(pool)
	if err := q.AddCounters(ctx, int32(b.o.Conns)); err != nil {
		return err
	}
	var count atomic.Int64
	runCtx, stop := context.WithTimeout(ctx, b.o.FloorDuration)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, b.o.Conns)
	start := time.Now()
	for c := range b.o.Conns {
		wg.Go(func() {
			for runCtx.Err() == nil {
				if err := q.BumpCounter(runCtx, int32(c+1)); err != nil {
					if runCtx.Err() == nil {
						errs <- err
					}
					return
				}
				count.Add(1)
			}
		})
	}
	for runCtx.Err() == nil {
		sleepCtx(runCtx, time.Second)
		b.say("floor: %d UPDATE transactions", count.Load())
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	b.done()
	b.floor = float64(count.Load()) / time.Since(start).Seconds()
	b.add(fmt.Sprintf("floor: single-row UPDATE transactions, %d clients", b.o.Conns), b.o.FloorDuration.String(),
		fmt.Sprintf("%.0f tx/s", b.floor), b.floor, "", nil)
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
