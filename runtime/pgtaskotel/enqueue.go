package pgtaskotel

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgtask/pgtask/runtime"
)

// EnqueueHook returns a runtime.EnqueueHook that records each enqueue
// request: it counts it in pgtask.jobs.enqueued and starts and ends a
// producer span "enqueue KIND" in the caller's trace, whose context the
// propagator writes into the request's metadata (with the W3C trace
// context, the keys traceparent and tracestate), so that the job's
// attempts continue that trace (see Middleware). Add it with
// runtime.AddEnqueueHook, or with InstrumentEnqueue, which adds it once per
// process.
//
// A hook runs before the request is checked and inserted, not around the
// insert: the span marks the job's creation, and a request that is refused
// afterwards (by a later hook, its checks, or a transaction rolled back) is
// still counted and has its span.
func EnqueueHook(opts ...Option) runtime.EnqueueHook {
	c := newConfig(opts)
	p := &producer{
		in:         newInstruments(c.meter(), trace.SpanKindProducer, "enqueue", "create"),
		tracer:     c.tracer(),
		propagator: c.propagator,
	}
	return p.hook
}

type producer struct {
	in         *instruments
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
}

func (p *producer) hook(ctx context.Context, req *runtime.EnqueueRequest) error {
	queue := req.Queue
	if queue == "" {
		queue = runtime.DefaultQueue // what the request's check will set
	}
	l := p.in.labels(queue, req.Kind)
	if p.in.enqueued.Enabled(ctx) {
		p.in.enqueued.Add(ctx, 1, l.add...)
	}
	ctx, span := p.tracer.Start(ctx, l.spanName, l.start...)
	defer span.End()
	if span.IsRecording() && req.Group != "" {
		span.SetAttributes(AttrGroup.String(req.Group))
	}
	if span.SpanContext().IsValid() {
		// The job's attempts continue this trace (see Middleware).
		if req.Metadata == nil {
			req.Metadata = map[string]string{}
		}
		p.propagator.Inject(ctx, propagation.MapCarrier(req.Metadata))
	}
	return nil
}

var enqueueHookAdded sync.Once

// InstrumentEnqueue adds EnqueueHook(opts...) to the hooks of every
// enqueue in this process, the first time it is called; later calls add
// nothing, so that enqueues are not counted twice.
func InstrumentEnqueue(opts ...Option) {
	enqueueHookAdded.Do(func() { runtime.AddEnqueueHook(EnqueueHook(opts...)) })
}

// Instrument makes a worker about to be built with cfg, and the enqueues
// of this process, record metrics and traces: it puts Middleware(opts...)
// first in cfg.Middleware and calls InstrumentEnqueue(opts...). The queue
// gauges are ObserveQueues', which one process of a database is enough to
// call.
func Instrument(cfg *runtime.Config, opts ...Option) {
	cfg.Middleware = append([]runtime.Middleware{Middleware(opts...)}, cfg.Middleware...)
	InstrumentEnqueue(opts...)
}
