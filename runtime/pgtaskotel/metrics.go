package pgtaskotel

import (
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// The attributes this package records. The queue is the messaging
// destination of OpenTelemetry's semantic conventions for messaging; the
// rest are pgtask's own.
const (
	// AttrSystem is messaging.system, "pgtask" on every span.
	AttrSystem = attribute.Key("messaging.system")
	// AttrQueue is the job's queue, on every metric and span.
	AttrQueue = attribute.Key("messaging.destination.name")
	// AttrKind is the job's kind, on every metric but the queue gauges,
	// and on every span.
	AttrKind = attribute.Key("pgtask.job.kind")
	// AttrOutcome is how an attempt ended (OutcomeSucceeded,
	// OutcomeRetried, OutcomeSnoozed, OutcomeFailed or OutcomeCancelled), on
	// pgtask.attempt.duration and the attempt's span.
	AttrOutcome = attribute.Key("pgtask.job.outcome")
	// AttrStatus is the status of the jobs pgtask.queue.depth counts:
	// scheduled, queued or started.
	AttrStatus = attribute.Key("pgtask.job.status")
	// AttrWaitingFor is what the queued jobs pgtask.queue.waiting counts
	// wait for: WaitingForWorker, WaitingForGroup, WaitingForLimit or
	// WaitingForRate.
	AttrWaitingFor = attribute.Key("pgtask.job.waiting_for")
	// AttrOperationType and AttrOperationName are the semantic
	// conventions' messaging.operation.type (create, process) and
	// messaging.operation.name (enqueue, process), on every span.
	AttrOperationType = attribute.Key("messaging.operation.type")
	AttrOperationName = attribute.Key("messaging.operation.name")
	// AttrJobID is messaging.message.id, the job's id, on an attempt's span.
	AttrJobID = attribute.Key("messaging.message.id")
	// AttrGroup is the job's group key, on the spans of a grouped job.
	AttrGroup = attribute.Key("pgtask.job.group")
	// AttrAttempt and AttrMaxAttempts are the attempt's number (from 1)
	// and the job's maximum, on an attempt's span.
	AttrAttempt     = attribute.Key("pgtask.job.attempt")
	AttrMaxAttempts = attribute.Key("pgtask.job.max_attempts")
)

// The values of AttrOutcome.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeRetried   = "retried" // the attempt failed; the job will be tried again
	OutcomeFailed    = "failed"  // the attempt failed and the job failed for good
	// OutcomeSnoozed: the handler snoozed the job (runtime.Snooze), which
	// runs again later with no attempt spent; not a failure.
	OutcomeSnoozed = "snoozed"
	// OutcomeCancelled: the attempt failed after an operator cancelled its
	// running job (runtime.ErrJobCancelled), which ends the job cancelled.
	OutcomeCancelled = "cancelled"
)

// The values of AttrWaitingFor.
const (
	// WaitingForWorker: runnable jobs (ungrouped, a group's head, or
	// admitted by their concurrency limit), which the next claim of a
	// worker of their queue and kind may take.
	WaitingForWorker = "worker"
	// WaitingForGroup: jobs behind their group's head.
	WaitingForGroup = "group"
	// WaitingForLimit: jobs waiting for a free slot of their concurrency
	// limit (runtime.EnqueueOptions.Limit).
	WaitingForLimit = "limit"
	// WaitingForRate: jobs waiting for a token of their rate limit
	// (runtime.EnqueueOptions.Rate).
	WaitingForRate = "rate"
)

// outcome is how an attempt ended, as an index into outcomeNames.
type outcome int

const (
	succeeded outcome = iota
	retried
	failed
	cancelled
	snoozed
)

var outcomeNames = [...]string{succeeded: OutcomeSucceeded, retried: OutcomeRetried, failed: OutcomeFailed, cancelled: OutcomeCancelled, snoozed: OutcomeSnoozed}

// Histogram bucket boundaries, in seconds. Attempts run from milliseconds
// to the timeout (a minute by default); a job can wait from milliseconds
// to hours.
var (
	durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	waitBuckets     = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400}
)

// instruments are the synchronous instruments of the middleware and the
// enqueue hook, with the attributes of each (queue, kind) prepared once.
type instruments struct {
	enqueued, started, succeeded, retried, snoozed, failed, cancelled metric.Int64Counter
	duration, wait                                                    metric.Float64Histogram

	spanKind trace.SpanKind
	verb     string   // the operation's name, first word of the span name
	opType   string   // the semantic conventions' operation type
	byJob    sync.Map // labelKey -> *labels
}

// newInstruments creates the instruments on m. Its spans are of kind
// spanKind, named verb and the job's kind, with opType as their operation
// type. A meter that refuses an instrument (none does for these names) is
// reported to otel.Handle, and the instrument it returned anyway is used.
func newInstruments(m metric.Meter, spanKind trace.SpanKind, verb, opType string) *instruments {
	in := &instruments{spanKind: spanKind, verb: verb, opType: opType}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	in.enqueued = counter("pgtask.jobs.enqueued", "{job}", "Jobs enqueued: requests that reached the enqueue hooks.")
	in.started = counter("pgtask.jobs.started", "{attempt}", "Attempts started.")
	in.succeeded = counter("pgtask.jobs.succeeded", "{job}", "Attempts that succeeded.")
	in.retried = counter("pgtask.jobs.retried", "{attempt}", "Attempts that failed, their job to be tried again.")
	in.snoozed = counter("pgtask.jobs.snoozed", "{attempt}", "Attempts that snoozed their job: it runs again later, with no attempt spent.")
	in.failed = counter("pgtask.jobs.failed", "{job}", "Attempts that failed, their job failed for good.")
	in.cancelled = counter("pgtask.jobs.cancelled", "{job}", "Attempts that failed after an operator cancelled their running job.")
	in.duration = histogram("pgtask.attempt.duration", "How long attempts ran, by outcome.", durationBuckets)
	in.wait = histogram("pgtask.queue.wait", "How long attempts waited to start from when their job was due.", waitBuckets)
	if err := errors.Join(errs...); err != nil {
		otel.Handle(fmt.Errorf("pgtaskotel: create instruments: %w", err))
	}
	return in
}

// labelKey is what instruments.byJob is keyed by.
type labelKey struct{ queue, kind string }

// labels are a (queue, kind)'s attributes, in the forms the instruments
// take: made once, so that recording allocates nothing.
type labels struct {
	add      []metric.AddOption
	record   []metric.RecordOption
	outcome  [len(outcomeNames)][]metric.RecordOption
	spanName string
	start    []trace.SpanStartOption // the span's kind and its attributes known at start
}

// labels returns the labels of a job of kind on queue.
func (in *instruments) labels(queue, kind string) *labels {
	k := labelKey{queue, kind}
	if l, ok := in.byJob.Load(k); ok {
		return l.(*labels)
	}
	set := attribute.NewSet(AttrQueue.String(queue), AttrKind.String(kind))
	l := &labels{
		add:      []metric.AddOption{metric.WithAttributeSet(set)},
		record:   []metric.RecordOption{metric.WithAttributeSet(set)},
		spanName: in.verb + " " + kind,
		start: []trace.SpanStartOption{trace.WithSpanKind(in.spanKind), trace.WithAttributes(
			AttrSystem.String("pgtask"), AttrOperationType.String(in.opType), AttrOperationName.String(in.verb),
			AttrQueue.String(queue), AttrKind.String(kind))},
	}
	for o, name := range outcomeNames {
		l.outcome[o] = []metric.RecordOption{metric.WithAttributeSet(
			attribute.NewSet(AttrQueue.String(queue), AttrKind.String(kind), AttrOutcome.String(name)))}
	}
	actual, _ := in.byJob.LoadOrStore(k, l)
	return actual.(*labels)
}
