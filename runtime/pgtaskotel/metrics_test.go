package pgtaskotel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtaskotel"
)

func panicky(context.Context, *runtime.Job) error { panic("boom") }

// After a run with successes, retried failures, snoozes, final failures
// (returned, NoRetry, a panic, a return past the timeout, a snooze past its
// task's cap) and a running job cancelled,
// each counter and histogram holds what the worker recorded, by queue and
// kind, in both modes.
func TestMetricsOfARun(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			tel := newTelemetry(t)
			pool, url := newPool(t)
			const queue = "work"
			// running is closed when the cancelled job's handler runs: a
			// job claimed in a batch may wait in it before its handler
			// starts, and one cancelled then never runs.
			running := make(chan struct{})
			var sleeps atomic.Int32
			regs := []runtime.Registration{
				{Kind: "ok", Handler: func(context.Context, *runtime.Job) error {
					time.Sleep(20 * time.Millisecond)
					return nil
				}},
				{Kind: "flaky", Handler: func(_ context.Context, job *runtime.Job) error {
					if job.Attempt == 1 {
						return runtime.RetryAfter(0, errors.New("not yet"))
					}
					return nil
				}},
				{Kind: "doomed", Handler: func(context.Context, *runtime.Job) error {
					return runtime.RetryAfter(0, errors.New("never"))
				}},
				{Kind: "sleepy", Handler: func(context.Context, *runtime.Job) error {
					if sleeps.Add(1) <= 2 {
						return fmt.Errorf("not ready: %w", runtime.Snooze(0))
					}
					return nil
				}},
				{Kind: "restless", MaxSnoozes: 1, Handler: func(context.Context, *runtime.Job) error {
					return runtime.Snooze(0) // the second snooze passes the cap
				}},
				{Kind: "final", Handler: func(context.Context, *runtime.Job) error {
					return runtime.NoRetry(errors.New("hopeless"))
				}},
				{Kind: "panics", Handler: panicky},
				{Kind: "late", Timeout: 50 * time.Millisecond, Handler: func(context.Context, *runtime.Job) error {
					time.Sleep(150 * time.Millisecond) // ignores its context, then reports success
					return nil
				}},
				{Kind: "cancelled", Handler: func(ctx context.Context, _ *runtime.Job) error {
					close(running)
					<-ctx.Done() // until an operator cancels it
					return context.Cause(ctx)
				}},
			}
			cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{queue: {Mode: mode, Concurrency: 4}}}
			cfg.Middleware = []runtime.Middleware{pgtaskotel.Middleware(tel.opts...)}
			run(t, newWorker(t, url, cfg, regs...))

			ctx := tel.enqueueContext(context.Background())
			in := runtime.WithQueue(queue)
			var ids []runtime.JobID
			for range 3 {
				ids = append(ids, enqueue(t, ctx, pool, "ok", in))
			}
			for range 2 {
				ids = append(ids, enqueue(t, ctx, pool, "flaky", in))
			}
			ids = append(ids,
				enqueue(t, ctx, pool, "doomed", in, runtime.WithMaxAttempts(2)),
				enqueue(t, ctx, pool, "final", in, runtime.WithMaxAttempts(5)),
				enqueue(t, ctx, pool, "sleepy", in, runtime.WithMaxAttempts(1)),
				enqueue(t, ctx, pool, "restless", in, runtime.WithMaxAttempts(5)),
				enqueue(t, ctx, pool, "panics", in, runtime.WithMaxAttempts(1)),
				enqueue(t, ctx, pool, "late", in, runtime.WithMaxAttempts(1)))
			cancel := enqueue(t, ctx, pool, "cancelled", in)
			ids = append(ids, cancel)
			select {
			case <-running:
			case <-time.After(30 * time.Second):
				t.Fatal("the job to cancel did not start")
			}
			if ok, err := runtime.CancelJob(context.Background(), pool, cancel); !ok || err != nil {
				t.Fatalf("cancel the running job: %t, %v", ok, err)
			}
			attempts := map[string]int{}
			for _, id := range ids {
				j := waitFinished(t, pool, id)
				attempts[j.Kind] += j.Attempts
				if j.Kind == "cancelled" && j.Status != runtime.StatusCancelled {
					t.Errorf("the cancelled job ended %s", j.Status)
				}
				if j.Kind == "panics" && (len(j.Errors) != 1 || j.Errors[0].Error != "panic: boom" ||
					!strings.Contains(j.Errors[0].Stack, "pgtaskotel_test.panicky")) {
					t.Errorf("the panicking job's errors %+v, want the panic with a stack naming its handler", j.Errors)
				}
			}

			rm := tel.collect(t)
			type want struct {
				enqueued, started, succeeded, retried, snoozed, failed, cancelled int64
			}
			for kind, w := range map[string]want{
				"ok":        {enqueued: 3, started: 3, succeeded: 3},
				"flaky":     {enqueued: 2, started: 4, succeeded: 2, retried: 2},
				"doomed":    {enqueued: 1, started: 2, retried: 1, failed: 1},
				"final":     {enqueued: 1, started: 1, failed: 1},
				"sleepy":    {enqueued: 1, started: 3, succeeded: 1, snoozed: 2},
				"restless":  {enqueued: 1, started: 2, snoozed: 1, failed: 1},
				"panics":    {enqueued: 1, started: 1, failed: 1},
				"late":      {enqueued: 1, started: 1, failed: 1},
				"cancelled": {enqueued: 1, started: 1, cancelled: 1},
			} {
				attrs := []attribute.KeyValue{pgtaskotel.AttrQueue.String(queue), pgtaskotel.AttrKind.String(kind)}
				got := want{
					enqueued:  counter(t, rm, "pgtask.jobs.enqueued", attrs...),
					started:   counter(t, rm, "pgtask.jobs.started", attrs...),
					succeeded: counter(t, rm, "pgtask.jobs.succeeded", attrs...),
					retried:   counter(t, rm, "pgtask.jobs.retried", attrs...),
					snoozed:   counter(t, rm, "pgtask.jobs.snoozed", attrs...),
					failed:    counter(t, rm, "pgtask.jobs.failed", attrs...),
					cancelled: counter(t, rm, "pgtask.jobs.cancelled", attrs...),
				}
				if got != w {
					t.Errorf("%s: counted %+v, want %+v", kind, got, w)
				}
				if int64(attempts[kind]) != w.started-w.snoozed {
					t.Errorf("%s: the database counts %d attempts, the metrics %d started, %d of them snoozed",
						kind, attempts[kind], w.started, w.snoozed)
				}
				for outcome, n := range map[string]int64{
					pgtaskotel.OutcomeSucceeded: w.succeeded, pgtaskotel.OutcomeRetried: w.retried,
					pgtaskotel.OutcomeFailed: w.failed, pgtaskotel.OutcomeCancelled: w.cancelled,
					pgtaskotel.OutcomeSnoozed: w.snoozed,
				} {
					if c, _ := histogram(t, rm, "pgtask.attempt.duration", append(attrs, pgtaskotel.AttrOutcome.String(outcome))...); int64(c) != n {
						t.Errorf("%s: %d %s attempts timed, want %d", kind, c, outcome, n)
					}
				}
				if c, _ := histogram(t, rm, "pgtask.queue.wait", attrs...); int64(c) != w.started {
					t.Errorf("%s: %d waits recorded, want one per attempt: %d", kind, c, w.started)
				}
			}
			okAttrs := []attribute.KeyValue{pgtaskotel.AttrQueue.String(queue), pgtaskotel.AttrKind.String("ok")}
			if _, sum := histogram(t, rm, "pgtask.attempt.duration", okAttrs...); sum < 3*0.020 || sum > 3*5.0 {
				t.Errorf("3 attempts of 20 ms took %.3f s in all", sum)
			}
			if _, sum := histogram(t, rm, "pgtask.queue.wait", okAttrs...); sum <= 0 || sum > 3*10.0 {
				t.Errorf("3 jobs waited %.3f s in all", sum)
			}
		})
	}
}

// instrumented is the meter provider the hook that Instrument adds, once
// per process, records into: it lives as long as the hook, for the whole
// test binary (go test -count=N runs the test N times in one process).
var instrumented = sync.OnceValues(func() (*sdkmetric.ManualReader, *sdkmetric.MeterProvider) {
	reader := sdkmetric.NewManualReader()
	return reader, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
})

// Instrument puts the middleware first, outside the middleware already
// configured, and adds the enqueue hook once, however often it is called.
func TestInstrumentAddsTheHookOnce(t *testing.T) {
	// Not parallel, and its hook neither traces nor propagates: the hook
	// stays for the whole process and sees every later enqueue, so this
	// test reads only its own queue, and what it counted before a run.
	reader, meters := instrumented()
	opts := []pgtaskotel.Option{pgtaskotel.WithMeterProvider(meters),
		pgtaskotel.WithTracerProvider(tracenoop.NewTracerProvider()),
		pgtaskotel.WithPropagator(propagation.NewCompositeTextMapPropagator())}
	pool, url := newPool(t)
	const queue, slow = "instrumented", 50 * time.Millisecond
	inner := func(ctx context.Context, job *runtime.Job, next runtime.Handler) error {
		time.Sleep(slow)
		return next(ctx, job)
	}
	cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{queue: {}}, Middleware: []runtime.Middleware{inner}}
	pgtaskotel.Instrument(&cfg, opts...)
	other := newTelemetry(t)
	second := runtime.Config{}
	pgtaskotel.Instrument(&second, other.opts...)
	if len(cfg.Middleware) != 2 || len(second.Middleware) != 1 {
		t.Fatalf("%d and %d middleware, want 2 and 1", len(cfg.Middleware), len(second.Middleware))
	}
	attrs := []attribute.KeyValue{pgtaskotel.AttrQueue.String(queue), pgtaskotel.AttrKind.String("k")}
	type counts struct {
		enqueued, succeeded, timed int64
		took                       float64
	}
	read := func() counts {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		n, sum := histogram(t, rm, "pgtask.attempt.duration", attrs...)
		return counts{counter(t, rm, "pgtask.jobs.enqueued", attrs...), counter(t, rm, "pgtask.jobs.succeeded", attrs...), int64(n), sum}
	}
	before := read()
	w := newWorker(t, url, cfg, runtime.Registration{Kind: "k", Handler: func(context.Context, *runtime.Job) error { return nil }})
	enqueue(t, context.Background(), pool, "k", runtime.WithQueue(queue))
	if n, err := w.Drain(context.Background()); err != nil || n != 1 {
		t.Fatalf("drained %d: %v", n, err)
	}
	after := read()
	if got := (counts{after.enqueued - before.enqueued, after.succeeded - before.succeeded, after.timed - before.timed, 0}); got != (counts{1, 1, 1, 0}) {
		t.Errorf("enqueued %d, succeeded %d, timed %d; want 1 each", got.enqueued, got.succeeded, got.timed)
	}
	if took := after.took - before.took; took < slow.Seconds() {
		t.Errorf("the attempt took %.3f s, less than the %s the middleware configured before spent in it", took, slow)
	}
	if e := counter(t, other.collect(t), "pgtask.jobs.enqueued"); e != 0 {
		t.Errorf("the second Instrument's hook counted %d enqueues, want it never added", e)
	}
}
