package pgtaskotel_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtaskotel"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// telemetry is an in-memory OpenTelemetry SDK for one test: a meter
// provider read on demand and a tracer provider that keeps every span.
type telemetry struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	opts   []pgtaskotel.Option
}

func newTelemetry(t testing.TB) *telemetry {
	t.Helper()
	tel := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	tel.tp = tp
	t.Cleanup(func() {
		mp.Shutdown(context.Background()) //nolint:errcheck // nothing is exported
		tp.Shutdown(context.Background()) //nolint:errcheck // nothing is exported
	})
	tel.opts = []pgtaskotel.Option{pgtaskotel.WithMeterProvider(mp), pgtaskotel.WithTracerProvider(tp),
		pgtaskotel.WithPropagator(propagation.TraceContext{})}
	return tel
}

// hookKey is the context key under which a test passes its enqueue hook:
// hooks are added for the whole process, so the tests add one that calls
// the hook of the test whose context the enqueue runs in.
type hookKey struct{}

var addTestHook = sync.OnceFunc(func() {
	runtime.AddEnqueueHook(func(ctx context.Context, req *runtime.EnqueueRequest) error {
		if h, ok := ctx.Value(hookKey{}).(runtime.EnqueueHook); ok {
			return h(ctx, req)
		}
		return nil
	})
})

// tracerProvider is the provider the test's spans are recorded by.
func (tel *telemetry) tracerProvider() trace.TracerProvider { return tel.tp }

// enqueueContext returns a context whose enqueues run tel's enqueue hook.
func (tel *telemetry) enqueueContext(ctx context.Context) context.Context {
	addTestHook()
	return context.WithValue(ctx, hookKey{}, pgtaskotel.EnqueueHook(tel.opts...))
}

func (tel *telemetry) collect(t testing.TB) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

// find returns the metric called name.
func find(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// matches reports whether set holds every one of want.
func matches(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// counter sums the points of the int64 counter name whose attributes
// include want.
func counter(t testing.TB, rm metricdata.ResourceMetrics, name string, want ...attribute.KeyValue) int64 {
	t.Helper()
	m, ok := find(rm, name)
	if !ok {
		return 0
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T, want a Sum[int64]", name, m.Data)
	}
	var n int64
	for _, p := range sum.DataPoints {
		if matches(p.Attributes, want) {
			n += p.Value
		}
	}
	return n
}

// histogram returns the count and sum of the points of the float64
// histogram name whose attributes include want.
func histogram(t testing.TB, rm metricdata.ResourceMetrics, name string, want ...attribute.KeyValue) (uint64, float64) {
	t.Helper()
	m, ok := find(rm, name)
	if !ok {
		return 0, 0
	}
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is a %T, want a Histogram[float64]", name, m.Data)
	}
	var n uint64
	var sum float64
	for _, p := range h.DataPoints {
		if matches(p.Attributes, want) {
			n += p.Count
			sum += p.Sum
		}
	}
	return n, sum
}

// gauge returns the value of the gauge name's point whose attributes are
// exactly want, and whether there is one.
func gauge[N int64 | float64](t testing.TB, rm metricdata.ResourceMetrics, name string, want ...attribute.KeyValue) (N, bool) {
	t.Helper()
	m, ok := find(rm, name)
	if !ok {
		return 0, false
	}
	g, ok := m.Data.(metricdata.Gauge[N])
	if !ok {
		t.Fatalf("%s is a %T, want a Gauge[%T]", name, m.Data, N(0))
	}
	for _, p := range g.DataPoints {
		if p.Attributes.Len() == len(want) && matches(p.Attributes, want) {
			return p.Value, true
		}
	}
	return 0, false
}

// newPool returns a pool on a database of the test's own.
func newPool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	url := pgtasktest.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, url
}

// newWorker builds a worker on url with regs registered; the test runs or
// drains it.
func newWorker(t testing.TB, url string, cfg runtime.Config, regs ...runtime.Registration) *runtime.Worker {
	t.Helper()
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.MaintenanceInterval == 0 {
		cfg.MaintenanceInterval = 50 * time.Millisecond
	}
	w, err := runtime.NewWorker(context.Background(), pc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	for _, r := range regs {
		if err := w.Register(r); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// run runs w until the test ends.
func run(t testing.TB, w *runtime.Worker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker Run: %v", err)
		}
	})
}

func enqueue(t testing.TB, ctx context.Context, db runtime.DB, kind string, opts ...runtime.EnqueueOption) runtime.JobID {
	t.Helper()
	req := runtime.EnqueueRequest{Kind: kind, Payload: json.RawMessage(`{}`)}
	req.Apply(opts...)
	id, err := runtime.Enqueue(ctx, db, req)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// waitFinished waits until job id is finished and returns it.
func waitFinished(t testing.TB, db runtime.DB, id runtime.JobID) *runtime.JobInfo {
	t.Helper()
	return waitFor(t, db, id, "finished", runtime.Status.Finished)
}

// waitStatus waits until job id has status s.
func waitStatus(t testing.TB, db runtime.DB, id runtime.JobID, s runtime.Status) {
	t.Helper()
	waitFor(t, db, id, string(s), func(got runtime.Status) bool { return got == s })
}

// waitFor waits until the status of job id satisfies ok (described by
// want) and returns the job.
func waitFor(t testing.TB, db runtime.DB, id runtime.JobID, want string, ok func(runtime.Status) bool) *runtime.JobInfo {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, err := runtime.GetJob(context.Background(), db, id)
		if err != nil {
			t.Fatal(err)
		}
		if ok(j.Status) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d is %s after 10s, want it %s", id, j.Status, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
