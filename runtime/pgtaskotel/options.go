package pgtaskotel

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// scope is the instrumentation scope of every meter and tracer this package
// creates.
const scope = "github.com/pgtask/pgtask/runtime/pgtaskotel"

// An Option changes where the instrumentation sends what it records. Each
// function takes the options that concern it and ignores the others.
type Option func(*config)

type config struct {
	meters         metric.MeterProvider
	tracers        trace.TracerProvider
	propagator     propagation.TextMapPropagator
	newTracePerTry bool
}

// WithMeterProvider records metrics with mp instead of the global
// provider (otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meters = mp }
}

// WithTracerProvider records spans with tp instead of the global provider
// (otel.GetTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracers = tp }
}

// WithPropagator carries the trace context from an enqueue to the job's
// attempts with p instead of the global propagator
// (otel.GetTextMapPropagator).
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.propagator = p }
}

// WithNewTracePerAttempt starts each attempt's span as the root of a trace
// of its own, linked to the enqueue span, instead of as the enqueue span's
// child. Use it when jobs wait long (scheduled jobs, retries hours apart)
// and a trace spanning that time is unwelcome in the tracing backend.
func WithNewTracePerAttempt() Option {
	return func(c *config) { c.newTracePerTry = true }
}

// newConfig applies opts over the defaults: the otel globals, which follow
// a provider or propagator set later with otel.SetMeterProvider and the
// like.
func newConfig(opts []Option) config {
	var c config
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	if c.meters == nil {
		c.meters = otel.GetMeterProvider()
	}
	if c.tracers == nil {
		c.tracers = otel.GetTracerProvider()
	}
	if c.propagator == nil {
		c.propagator = otel.GetTextMapPropagator()
	}
	return c
}

func (c config) meter() metric.Meter  { return c.meters.Meter(scope) }
func (c config) tracer() trace.Tracer { return c.tracers.Tracer(scope) }
