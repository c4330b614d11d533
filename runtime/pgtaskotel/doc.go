// Package pgtaskotel records what pgtask's workers and enqueues do as
// OpenTelemetry metrics and traces, through the runtime's hooks: a
// middleware around each attempt and an enqueue hook. It uses only the
// OpenTelemetry API; the application chooses the SDK and exporters, and
// with none set (the otel globals' default) recording costs next to
// nothing.
//
//	cfg := runtime.Config{Queues: ...}
//	pgtaskotel.Instrument(&cfg)                          // attempts, and this process's enqueues
//	worker, err := runtime.NewWorker(ctx, poolConfig, cfg)
//	reg, err := pgtaskotel.ObserveQueues(pool)           // queue depth, waiting and oldest age, in one process
//
// A process that only enqueues calls InstrumentEnqueue instead of
// Instrument.
//
// Metrics, each with the attributes messaging.destination.name (the
// queue) and pgtask.job.kind:
//
//	pgtask.jobs.enqueued     counter    enqueue requests
//	pgtask.jobs.started      counter    attempts started
//	pgtask.jobs.succeeded    counter    attempts that succeeded
//	pgtask.jobs.retried      counter    attempts that failed, the job to be tried again
//	pgtask.jobs.snoozed      counter    attempts that snoozed their job (runtime.Snooze): no failure, no attempt spent
//	pgtask.jobs.failed       counter    attempts that failed, the job failed for good
//	pgtask.jobs.cancelled    counter    attempts that failed after an operator cancelled their running job
//	pgtask.attempt.duration  histogram  seconds an attempt ran; also by pgtask.job.outcome
//	pgtask.queue.wait        histogram  seconds an attempt waited to start from when its job was due
//
// and ObserveQueues' gauges, with the queue only: pgtask.queue.depth (also
// by pgtask.job.status), pgtask.queue.waiting (the queued jobs, also by
// pgtask.job.waiting_for: a worker, their group, a concurrency limit or a rate limit)
// and pgtask.queue.oldest_age.
//
// Spans: "enqueue KIND" (producer) when a job is enqueued and "process
// KIND" (consumer) around each attempt, its child (or linked to it; see
// Middleware): the enqueue span's context travels with the job, in its
// metadata.
//
// What the middleware counts is what the handler returned, judged by the
// worker's rules (a failure is retried unless it is runtime.NoRetry or the
// job's last attempt; a runtime.Snooze counts as snoozed, except the one past
// its task's cap (runtime.Job.MaxSnoozes), which fails the job; a return after the timeout is a failure; a failure
// of a job cancelled while it ran ends it cancelled). The worker can still
// record something else where the handler's return was not the end of the
// attempt: a success whose transaction then failed or whose database
// session was lost is recorded as a failure, a failure whose cancel request
// reached the database but not yet the worker ends the job cancelled, a
// lease-mode attempt that was taken over is not recorded at all, and a
// handler abandoned after ignoring its timeout is counted only if and when
// it returns.
package pgtaskotel
