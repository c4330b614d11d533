package pgtaskotel_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtaskotel"
)

// spansNamed returns the ended spans called name, in the order they ended.
func spansNamed(tel *telemetry, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// attr returns the value of the span's attribute k.
func attr(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// The enqueue span is a child of the caller's span; the job carries its
// context, and each attempt's span, run by a worker, is its child in the
// same trace, with the attempt's outcome, its error and the span the
// handler sees.
func TestAttemptSpansContinueTheEnqueueTrace(t *testing.T) {
	t.Parallel()
	tel := newTelemetry(t)
	pool, url := newPool(t)
	var mu sync.Mutex
	var seen []trace.SpanContext // what each attempt's handler saw
	cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: runtime.ModeLease}}}
	cfg.Middleware = []runtime.Middleware{pgtaskotel.Middleware(tel.opts...)}
	run(t, newWorker(t, url, cfg, runtime.Registration{Kind: "traced", Handler: func(ctx context.Context, job *runtime.Job) error {
		mu.Lock()
		seen = append(seen, trace.SpanContextFromContext(ctx))
		mu.Unlock()
		if job.Attempt == 1 {
			return runtime.RetryAfter(0, errors.New("first try fails"))
		}
		return nil
	}}))

	tp := tel.tracerProvider()
	ctx, request := tp.Tracer("test").Start(tel.enqueueContext(context.Background()), "request")
	id := enqueue(t, ctx, pool, "traced", runtime.WithGroup("g1"))
	request.End()
	j := waitFinished(t, pool, id)
	if j.Status != runtime.StatusSucceeded || j.Metadata["traceparent"] == "" {
		t.Fatalf("job ended %s with metadata %v, want it succeeded carrying a traceparent", j.Status, j.Metadata)
	}

	enqueues := spansNamed(tel, "enqueue traced")
	if len(enqueues) != 1 {
		t.Fatalf("%d enqueue spans, want 1", len(enqueues))
	}
	e := enqueues[0]
	if e.SpanKind() != trace.SpanKindProducer || e.Parent().SpanID() != request.SpanContext().SpanID() ||
		e.SpanContext().TraceID() != request.SpanContext().TraceID() {
		t.Errorf("enqueue span: kind %s, parent %s, want a producer span, child of the request %s",
			e.SpanKind(), e.Parent().SpanID(), request.SpanContext().SpanID())
	}
	if got := attr(e, pgtaskotel.AttrGroup).AsString(); got != "g1" {
		t.Errorf("enqueue span's group %q", got)
	}

	attempts := spansNamed(tel, "process traced")
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2", len(attempts))
	}
	mu.Lock()
	defer mu.Unlock()
	for i, a := range attempts {
		if a.SpanKind() != trace.SpanKindConsumer || a.Parent().SpanID() != e.SpanContext().SpanID() ||
			a.SpanContext().TraceID() != e.SpanContext().TraceID() || len(a.Links()) != 0 {
			t.Errorf("attempt %d: kind %s, trace %s, parent %s, %d links; want a consumer span, child of the enqueue span %s in trace %s",
				i+1, a.SpanKind(), a.SpanContext().TraceID(), a.Parent().SpanID(), len(a.Links()), e.SpanContext().SpanID(), e.SpanContext().TraceID())
		}
		if !slices.ContainsFunc(seen, a.SpanContext().Equal) {
			t.Errorf("attempt %d's span %s is not what a handler saw: %v", i+1, a.SpanContext().SpanID(), seen)
		}
		for k, want := range map[attribute.Key]attribute.Value{
			pgtaskotel.AttrSystem:  attribute.StringValue("pgtask"),
			pgtaskotel.AttrQueue:   attribute.StringValue(runtime.DefaultQueue),
			pgtaskotel.AttrKind:    attribute.StringValue("traced"),
			pgtaskotel.AttrJobID:   attribute.StringValue(strconv.FormatInt(int64(id), 10)),
			pgtaskotel.AttrGroup:   attribute.StringValue("g1"),
			pgtaskotel.AttrAttempt: attribute.IntValue(i + 1),
		} {
			if got := attr(a, k); got != want {
				t.Errorf("attempt %d: %s = %v, want %v", i+1, k, got.Emit(), want.Emit())
			}
		}
	}
	first, second := attempts[0], attempts[1]
	if first.Status().Code != codes.Error || first.Status().Description != "first try fails" ||
		attr(first, pgtaskotel.AttrOutcome).AsString() != pgtaskotel.OutcomeRetried || len(first.Events()) != 1 {
		t.Errorf("failed attempt: status %+v, outcome %q, %d events; want an error, retried, its exception recorded",
			first.Status(), attr(first, pgtaskotel.AttrOutcome).AsString(), len(first.Events()))
	}
	if second.Status().Code == codes.Error || attr(second, pgtaskotel.AttrOutcome).AsString() != pgtaskotel.OutcomeSucceeded {
		t.Errorf("successful attempt: status %+v, outcome %q", second.Status(), attr(second, pgtaskotel.AttrOutcome).AsString())
	}
}

// An attempt run in a context that has a span already (here Drain's) is
// that span's child, linked to the enqueue span; with
// WithNewTracePerAttempt, an attempt starts a trace of its own, linked.
func TestAttemptSpansLinkWhenNotTheEnqueueSpansChild(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		ambient bool
		opts    []pgtaskotel.Option
	}{
		{name: "in a span", ambient: true},
		{name: "new trace", opts: []pgtaskotel.Option{pgtaskotel.WithNewTracePerAttempt()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tel := newTelemetry(t)
			pool, url := newPool(t)
			cfg := runtime.Config{Middleware: []runtime.Middleware{pgtaskotel.Middleware(append(tel.opts, c.opts...)...)}}
			w := newWorker(t, url, cfg, runtime.Registration{Kind: "linked", Handler: func(context.Context, *runtime.Job) error { return nil }})
			enqueue(t, tel.enqueueContext(context.Background()), pool, "linked")

			ctx := context.Background()
			var drain trace.Span
			if c.ambient {
				ctx, drain = tel.tracerProvider().Tracer("test").Start(ctx, "drain")
			}
			if n, err := w.Drain(ctx); err != nil || n != 1 {
				t.Fatalf("drained %d: %v", n, err)
			}
			enqueues, attempts := spansNamed(tel, "enqueue linked"), spansNamed(tel, "process linked")
			if len(enqueues) != 1 || len(attempts) != 1 {
				t.Fatalf("%d enqueue and %d attempt spans, want 1 each", len(enqueues), len(attempts))
			}
			e, a := enqueues[0].SpanContext(), attempts[0]
			if links := a.Links(); len(links) != 1 || links[0].SpanContext.TraceID() != e.TraceID() || links[0].SpanContext.SpanID() != e.SpanID() {
				t.Errorf("the attempt's links %+v, want one to the enqueue span %s", links, e.SpanID())
			}
			switch {
			case c.ambient && (a.Parent().SpanID() != drain.SpanContext().SpanID() || a.SpanContext().TraceID() != drain.SpanContext().TraceID()):
				t.Errorf("the attempt's parent %s, want the ambient span %s", a.Parent().SpanID(), drain.SpanContext().SpanID())
			case !c.ambient && (a.Parent().IsValid() || a.SpanContext().TraceID() == e.TraceID()):
				t.Errorf("the attempt's parent %s in trace %s, want a new root (the enqueue's trace is %s)",
					a.Parent().SpanID(), a.SpanContext().TraceID(), e.TraceID())
			}
		})
	}
}
