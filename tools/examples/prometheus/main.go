// Command prometheus serves pgtask's OpenTelemetry metrics to Prometheus:
// it wires the OpenTelemetry SDK to a Prometheus exporter, instruments a
// worker and this process's enqueues with runtime/pgtaskotel, enqueues
// jobs (some fail and are retried, one fails for good, some wait in a
// queue no worker serves), serves /metrics, scrapes itself once, prints the
// pgtask lines and exits:
//
//	go -C tools run ./examples/prometheus
//
// It finds a database as the README says (DATABASE_URL first). The
// Prometheus client is a dependency of the tools module only, never of the
// library.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	otelprometheus "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtaskotel"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := runOnce(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "prometheus example:", err)
		os.Exit(1)
	}
}

// runOnce finds a database and runs the example in it.
func runOnce(ctx context.Context, out io.Writer) error {
	dbURL, cleanup, err := database(ctx, out)
	if err != nil {
		return err
	}
	defer cleanup()
	return run(ctx, out, dbURL)
}

// run runs the example in the database dbURL and prints the scrape to out.
func run(ctx context.Context, out io.Writer, dbURL string) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := runtime.Migrate(ctx, pool); err != nil {
		return err
	}

	// The OpenTelemetry SDK, exporting to a Prometheus registry of our own.
	registry := prometheus.NewRegistry()
	exporter, err := otelprometheus.New(otelprometheus.WithRegisterer(registry), otelprometheus.WithoutScopeInfo())
	if err != nil {
		return err
	}
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer meters.Shutdown(context.WithoutCancel(ctx)) //nolint:errcheck // nothing left to export
	otel.SetMeterProvider(meters)

	// pgtaskotel reads the global providers: the worker's attempts, this
	// process's enqueues, and the queues' depth and oldest wait.
	cfg := runtime.Config{
		Queues: map[string]runtime.QueueConfig{"reports": {Concurrency: 2}, "emails": {Concurrency: 2}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	pgtaskotel.Instrument(&cfg)
	gauges, err := pgtaskotel.ObserveQueues(pool)
	if err != nil {
		return err
	}
	defer gauges.Unregister() //nolint:errcheck // the provider shuts down next

	if err := work(ctx, pool, dbURL, cfg); err != nil {
		return err
	}
	return serveAndScrape(ctx, registry, out)
}

// work runs an instrumented worker until the jobs it enqueues are done.
func work(ctx context.Context, pool *pgxpool.Pool, dbURL string, cfg runtime.Config) error {
	poolConfig, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	worker, err := runtime.NewWorker(ctx, poolConfig, cfg)
	if err != nil {
		return err
	}
	defer worker.Close()
	regs := []runtime.Registration{
		{Kind: "render_report", Queue: "reports", Handler: func(context.Context, *runtime.Job) error {
			time.Sleep(30 * time.Millisecond)
			return nil
		}},
		{Kind: "send_email", Queue: "emails", Handler: func(_ context.Context, job *runtime.Job) error {
			switch {
			case strings.Contains(string(job.Payload), "bounce"):
				return runtime.NoRetry(errors.New("mailbox does not exist"))
			case job.Attempt == 1 && job.ID%2 == 0:
				return runtime.RetryAfter(10*time.Millisecond, errors.New("smtp: try again"))
			}
			time.Sleep(5 * time.Millisecond)
			return nil
		}},
	}
	for _, r := range regs {
		if err := worker.Register(r); err != nil {
			return err
		}
	}
	workCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- worker.Run(workCtx) }()
	defer func() { stop(); <-stopped }()

	var ids []runtime.JobID
	enqueue := func(kind, queue, payload string) error {
		id, err := runtime.Enqueue(ctx, pool, runtime.EnqueueRequest{Kind: kind, Payload: []byte(payload),
			EnqueueOptions: runtime.EnqueueOptions{Queue: queue}})
		ids = append(ids, id)
		return err
	}
	for i := range 5 {
		if err := enqueue("render_report", "reports", fmt.Sprintf(`{"report":%d}`, i)); err != nil {
			return err
		}
	}
	for i := range 6 {
		if err := enqueue("send_email", "emails", fmt.Sprintf(`{"to":"user%d@example.com"}`, i)); err != nil {
			return err
		}
	}
	if err := enqueue("send_email", "emails", `{"to":"bounce@example.com"}`); err != nil {
		return err
	}
	// Jobs in a queue this worker does not serve: the depth and oldest
	// wait gauges show them.
	for i := range 3 {
		if _, err := runtime.Enqueue(ctx, pool, runtime.EnqueueRequest{Kind: "archive", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)),
			EnqueueOptions: runtime.EnqueueOptions{Queue: "archive"}}); err != nil {
			return err
		}
	}
	return waitFinished(ctx, pool, ids)
}

// waitFinished waits until every job of ids is finished.
func waitFinished(ctx context.Context, pool *pgxpool.Pool, ids []runtime.JobID) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range ids {
		for {
			j, err := runtime.GetJob(ctx, pool, id)
			if err != nil {
				return err
			}
			if j.Status.Finished() {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("job %d is still %s after 30s", id, j.Status)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// serveAndScrape serves registry on /metrics of a local port, scrapes it
// once and prints the pgtask lines, leaving out histogram buckets.
func serveAndScrape(ctx context.Context, registry *prometheus.Registry, out io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go server.Serve(ln) //nolint:errcheck // ends with Shutdown below

	defer server.Shutdown(context.WithoutCancel(ctx)) //nolint:errcheck // nothing is in flight

	url := "http://" + ln.Addr().String() + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	fmt.Fprintf(out, "scraped %s (pgtask lines; histogram buckets left out):\n", url)
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		if strings.HasPrefix(line, "pgtask_") && !strings.Contains(line, "_bucket{") {
			fmt.Fprintln(out, line)
		}
	}
	return lines.Err()
}

// database finds a server as the README says and returns the URL of a
// database to use, made for this run unless DATABASE_URL names one.
func database(ctx context.Context, out io.Writer) (string, func(), error) {
	server, err := pgtasktest.Discover(ctx, pgtasktest.DiscoverOptions{
		EnvVars: []string{"DATABASE_URL"},
		Logf:    func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) },
	})
	if err != nil {
		return "", nil, err
	}
	if server.Source == pgtasktest.SourceEnv {
		return server.URL, func() { server.Close() }, nil
	}
	dbURL, err := pgtasktest.CreateDatabase(ctx, server.URL, "")
	if err != nil {
		server.Close()
		return "", nil, err
	}
	return dbURL, func() {
		pgtasktest.DropDatabase(context.WithoutCancel(ctx), server.URL, dbURL) //nolint:errcheck // best effort
		server.Close()
	}, nil
}
