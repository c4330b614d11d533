package pgtaskotel

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgtask/pgtask/runtime"
)

// Middleware returns a runtime.Middleware that records each attempt: a
// consumer span "process KIND", the counter pgtask.jobs.started, the
// histogram pgtask.queue.wait (from Job.RunAfter, when the job was due, to
// the attempt's start) and, as it ends, pgtask.jobs.succeeded,
// pgtask.jobs.retried, pgtask.jobs.failed or pgtask.jobs.cancelled and the
// histogram pgtask.attempt.duration. Put it first in Config.Middleware
// (Instrument does), so that its span is the context of the middleware
// after it and of the handler, and it times them all.
//
// The span continues the trace of the job's enqueue span (see EnqueueHook):
// it is that span's child, unless WithNewTracePerAttempt is given or the
// attempt runs in a context that has a span already, when it links to it
// instead.
//
// With no provider set (the otel globals' default), it only checks that
// every instrument is disabled and starts a span that does not record.
func Middleware(opts ...Option) runtime.Middleware {
	c := newConfig(opts)
	p := &processor{
		in:         newInstruments(c.meter(), trace.SpanKindConsumer, "process", "process"),
		tracer:     c.tracer(),
		propagator: c.propagator,
		newTrace:   c.newTracePerTry,
	}
	return p.middleware
}

type processor struct {
	in         *instruments
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	newTrace   bool
}

func (p *processor) middleware(ctx context.Context, job *runtime.Job, next runtime.Handler) (err error) {
	// What decides the outcome, read before inner middleware may change the job.
	st := standing{attempt: job.Attempt, maxAttempts: job.MaxAttempts, snoozes: job.Snoozes, maxSnoozes: job.MaxSnoozes}
	waits := !job.RunAfter.IsZero() && p.in.wait.Enabled(ctx)
	var start time.Time // zero: the duration is not recorded
	if waits || p.in.duration.Enabled(ctx) {
		start = time.Now()
	}
	l := p.in.labels(job.Queue, job.Kind)
	ctx, span := p.startSpan(ctx, job, l)
	if p.in.started.Enabled(ctx) {
		p.in.started.Add(ctx, 1, l.add...)
	}
	if waits {
		// Job.RunAfter is when the job was due, on the database's clock.
		p.in.wait.Record(ctx, max(start.Sub(job.RunAfter), 0).Seconds(), l.record...)
	}
	returned := false
	defer func() {
		if !returned {
			p.endAbruptly(ctx, span, l, start, st, recover())
		}
	}()
	err = next(ctx, job)
	returned = true
	o, recorded := judge(ctx, st, err)
	p.end(ctx, span, l, start, o, recorded)
	return err
}

// endAbruptly records an attempt whose handler panicked with v (the worker
// recovers the panic and records a failed attempt) or called
// runtime.Goexit (v is nil), and passes the panic on.
func (p *processor) endAbruptly(ctx context.Context, span trace.Span, l *labels, start time.Time, st standing, v any) {
	var err error = &runtime.PanicError{Value: v}
	if v == nil {
		err = errors.New("the handler's goroutine exited without returning")
	}
	o, recorded := judge(ctx, st, err)
	p.end(ctx, span, l, start, o, recorded)
	if v != nil {
		panic(v)
	}
}

// standing is where a job stood when its attempt began: what decides how
// the attempt's end is recorded.
type standing struct {
	attempt, maxAttempts int
	snoozes, maxSnoozes  int
}

// judge returns how the worker records an attempt whose handler (and the
// middleware inside this one) returned err in ctx, and the error it
// records: the rules of runtime's Worker.call (pipeline.go) and
// outcome.retries (record.go). An attempt whose job an operator cancelled while it ran ends
// cancelled if it failed, and succeeds if it completed anyway; one that
// returned after its timeout fails, whatever it returned; a failure is
// retried unless it is runtime.NoRetry or was the job's last attempt; a
// runtime.Snooze is a snooze, not a failure, unless the job has snoozed as
// often as its task allows: then it fails the job for good.
func judge(ctx context.Context, st standing, err error) (outcome, error) {
	if errors.Is(context.Cause(ctx), runtime.ErrJobCancelled) {
		if err == nil {
			return succeeded, nil
		}
		return cancelled, err
	}
	if err == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("the attempt returned after its timeout: %w", ctx.Err())
	}
	var se *runtime.SnoozeError
	switch {
	case err == nil:
		return succeeded, nil
	case !runtime.IsNoRetry(err) && errors.As(err, &se) && st.snoozes >= st.maxSnoozes:
		return failed, err
	case !runtime.IsNoRetry(err) && errors.As(err, &se):
		return snoozed, err
	case !runtime.IsNoRetry(err) && st.attempt < st.maxAttempts:
		return retried, err
	default:
		return failed, err
	}
}

// startSpan starts the attempt's span, a child of the enqueue span whose
// context the job carries, or linked to it.
func (p *processor) startSpan(ctx context.Context, job *runtime.Job, l *labels) (context.Context, trace.Span) {
	parent, link := p.creationContext(ctx, job)
	var span trace.Span
	if link.IsValid() {
		opts := append([]trace.SpanStartOption{trace.WithLinks(trace.Link{SpanContext: link})}, l.start...)
		if !trace.SpanContextFromContext(parent).IsValid() {
			opts = append(opts, trace.WithNewRoot())
		}
		ctx, span = p.tracer.Start(parent, l.spanName, opts...)
	} else {
		ctx, span = p.tracer.Start(parent, l.spanName, l.start...)
	}
	if span.IsRecording() {
		span.SetAttributes(AttrJobID.String(strconv.FormatInt(int64(job.ID), 10)), AttrAttempt.Int(job.Attempt), AttrMaxAttempts.Int(job.MaxAttempts))
		if job.Group != "" {
			span.SetAttributes(AttrGroup.String(job.Group))
		}
	}
	return ctx, span
}

// creationContext returns the context to start the attempt's span in and
// the span context to link it to, if any. The enqueue span (the job's
// creation context, carried in its metadata) is the parent when the
// attempt runs outside any trace, as the worker runs it; it is linked
// instead when ctx has a span already, or with WithNewTracePerAttempt.
func (p *processor) creationContext(ctx context.Context, job *runtime.Job) (parent context.Context, link trace.SpanContext) {
	carrier := metadataCarrier(job)
	if carrier == nil {
		return ctx, trace.SpanContext{}
	}
	ambient := trace.SpanContextFromContext(ctx)
	extracted := p.propagator.Extract(ctx, carrier)
	created := trace.SpanContextFromContext(extracted)
	switch {
	case !created.IsValid() || created.Equal(ambient):
		return ctx, trace.SpanContext{}
	case ambient.IsValid() || p.newTrace:
		// Keep what else was extracted (baggage), with the ambient span,
		// or none, as the parent.
		return trace.ContextWithSpanContext(extracted, ambient), created
	default:
		return extracted, trace.SpanContext{}
	}
}

// metadataCarrier is the job's trace context as the propagator reads it,
// or nil when the job carries none.
func metadataCarrier(job *runtime.Job) propagation.TextMapCarrier {
	if len(job.Metadata) == 0 {
		return nil
	}
	return propagation.MapCarrier(job.Metadata)
}

// end records how the attempt ended and ends its span.
func (p *processor) end(ctx context.Context, span trace.Span, l *labels, start time.Time, o outcome, err error) {
	if !start.IsZero() && p.in.duration.Enabled(ctx) {
		p.in.duration.Record(ctx, time.Since(start).Seconds(), l.outcome[o]...)
	}
	counter := p.in.succeeded
	switch o {
	case retried:
		counter = p.in.retried
	case snoozed:
		counter = p.in.snoozed
	case failed:
		counter = p.in.failed
	case cancelled:
		counter = p.in.cancelled
	}
	if counter.Enabled(ctx) {
		counter.Add(ctx, 1, l.add...)
	}
	if span.IsRecording() {
		span.SetAttributes(AttrOutcome.String(outcomeNames[o]))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}
