package pgtaskotel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
	"github.com/pgtask/pgtask/runtime/pgtaskotel"
)

// BenchmarkMiddleware measures what the middleware adds to an attempt: with
// no middleware, with the otel globals unset (no provider: what an
// application that does not use OpenTelemetry pays), and with the SDK's
// providers recording (spans sampled, dropped at their end):
//
//	go test -run '^$' -bench 'Middleware|EnqueueHook' -benchmem ./runtime/pgtaskotel
func BenchmarkMiddleware(b *testing.B) {
	ctx := context.Background()
	job := &runtime.Job{ID: 1, Kind: "k", Queue: runtime.DefaultQueue, Attempt: 1, MaxAttempts: 20,
		Payload: json.RawMessage(`{}`), CreatedAt: time.Now(), RunAfter: time.Now()}
	handler := func(context.Context, *runtime.Job) error { return nil }
	b.Run("none", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := handler(ctx, job); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range benchProviders(b) {
		b.Run(c.name, func(b *testing.B) {
			m := pgtaskotel.Middleware(c.opts...)
			b.ReportAllocs()
			for b.Loop() {
				if err := m(ctx, job, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEnqueueHook measures the enqueue hook on one request, as
// BenchmarkMiddleware does the middleware.
func BenchmarkEnqueueHook(b *testing.B) {
	ctx := context.Background()
	var none runtime.EnqueueHook = func(context.Context, *runtime.EnqueueRequest) error { return nil }
	b.Run("none", func(b *testing.B) {
		req := runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`{}`)}
		b.ReportAllocs()
		for b.Loop() {
			if err := none(ctx, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range benchProviders(b) {
		b.Run(c.name, func(b *testing.B) {
			h := pgtaskotel.EnqueueHook(c.opts...)
			req := runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`{}`)}
			b.ReportAllocs()
			for b.Loop() {
				req.Metadata = nil // each request has its own
				if err := h(ctx, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type benchProvider struct {
	name string
	opts []pgtaskotel.Option
}

// benchProviders are the unset otel globals and the SDK's providers with
// the W3C trace context propagator.
func benchProviders(b *testing.B) []benchProvider {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider()
	b.Cleanup(func() {
		mp.Shutdown(context.Background()) //nolint:errcheck // nothing is exported
		tp.Shutdown(context.Background()) //nolint:errcheck // nothing is exported
	})
	return []benchProvider{
		{"unset-globals", nil},
		{"sdk", []pgtaskotel.Option{pgtaskotel.WithMeterProvider(mp), pgtaskotel.WithTracerProvider(tp),
			pgtaskotel.WithPropagator(propagation.TraceContext{})}},
	}
}

// BenchmarkQueueGauges measures one collection of ObserveQueues' gauges
// against tables of 1,000 unfinished jobs and a growing number of finished
// ones, beside runtime.Stats, which counts every job. The collection's cost
// should not grow with the finished jobs:
//
//	go test -run '^$' -bench QueueGauges -benchtime 200x ./runtime/pgtaskotel
func BenchmarkQueueGauges(b *testing.B) {
	for _, finished := range []int{0, 100_000, 1_000_000} {
		ctx := context.Background()
		tel := newTelemetry(b)
		pool, _ := newPool(b)
		seed(b, pool, finished, 1_000)
		if _, err := pgtaskotel.ObserveQueues(pool, tel.opts...); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("finished=%d/gauges", finished), func(b *testing.B) {
			for b.Loop() {
				tel.collect(b)
			}
		})
		b.Run(fmt.Sprintf("finished=%d/stats", finished), func(b *testing.B) {
			for b.Loop() {
				if _, err := runtime.Stats(ctx, pool); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// seed enqueues finished jobs and cancels them, then enqueues pending
// ones: each over 4 queues, half of them in groups.
func seed(b *testing.B, db runtime.DB, finished, pending int) {
	ctx := context.Background()
	enqueueMany(b, db, finished)
	if finished > 0 {
		if _, err := runtime.CancelJobs(ctx, db, runtime.JobFilter{}, nil); err != nil {
			b.Fatal(err)
		}
	}
	enqueueMany(b, db, pending)
	if err := testdb.New(db).AnalyzeJobs(ctx); err != nil {
		b.Fatal(err)
	}
}

func enqueueMany(b *testing.B, db runtime.DB, jobs int) {
	const batch = 10_000
	reqs := make([]runtime.EnqueueRequest, 0, batch)
	for n := range jobs {
		r := runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`{"n":1}`)}
		r.Queue = fmt.Sprint("q", n%4)
		if n%2 == 0 {
			r.Group = fmt.Sprint(n % 1000)
		}
		reqs = append(reqs, r)
		if len(reqs) == batch || n == jobs-1 {
			if _, err := runtime.EnqueueMany(context.Background(), db, reqs); err != nil {
				b.Fatal(err)
			}
			reqs = reqs[:0]
		}
	}
}
