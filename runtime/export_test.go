package runtime

import (
	"context"
	"errors"
	"time"

	"github.com/pgtask/pgtask/gen"
)

// ApplyFunctionFiles lets tests apply function files of their own making.
var ApplyFunctionFiles = applyFunctionFiles

// MigrateWith lets tests migrate with migrations of their own making after
// pgtask's, as a later release appends them.
var MigrateWith = migrate

// JSONBRefusal lets the fuzz test compare the payload check with the
// server's jsonb input.
var JSONBRefusal = jsonbRefusal

// ParseWake reads a wake-up notification's payload as the listener does.
var ParseWake = parseWake

// LookBackEvery is how often claims look back from the start.
const LookBackEvery = lookBackEvery

// ID is the worker's id, which its claims carry.
func (w *Worker) ID() int32 { return w.id }

// HoldClaim marks a claim token as one of the worker's runners holds, and
// ForgetClaim unmarks it.
func (w *Worker) HoldClaim(token int64)   { w.claims.add(token) }
func (w *Worker) ForgetClaim(token int64) { w.claims.drop(token) }

// SchedulePeriodic runs one round of the leader's periodic scheduling,
// leader or not: tests race it to show the database keeps one job per tick.
func (w *Worker) SchedulePeriodic(ctx context.Context) { w.maint.periodic.schedule(ctx) }

// lostOutcome is a success of the first attempt of job id, as the worker
// that ran it knew it.
func (w *Worker) lostOutcome(ctx context.Context, id int64) (*queue, outcome, error) {
	j, err := gen.New(w.pool).GetJob(ctx, id)
	if err != nil {
		return nil, outcome{}, err
	}
	row := gen.ClaimJobsRow{ID: j.ID, Queue: j.Queue, Kind: j.Kind, Attempts: 1, MaxAttempts: j.MaxAttempts}
	return w.queues[j.Queue], outcome{row: row, reg: w.handler(j.Kind), start: time.Now()}, nil
}

// SettleAfterLostReply records, as a held runner does once its session is
// gone with the reply to its commit, the success of the first attempt of
// job id: that commit may have gone through.
func (w *Worker) SettleAfterLostReply(ctx context.Context, id int64) error {
	q, o, err := w.lostOutcome(ctx, id)
	if err != nil {
		return err
	}
	r := &runner{w: w, q: q, ctx: ctx, hard: ctx}
	r.settleLost(0, []heldOutcome{{outcome: o}}, errors.New("unexpected EOF"), false)
	return nil
}

// ResendLeaseOutcome sends again, as a lease-mode turn whose reply was lost
// does, the success of the first attempt of job id.
func (w *Worker) ResendLeaseOutcome(ctx context.Context, id int64) error {
	q, o, err := w.lostOutcome(ctx, id)
	if err != nil {
		return err
	}
	_, err = newLeaser(ctx, ctx, w, q).turn([]leaseOutcome{{outcome: o}}, 0, 0)
	return err
}

// SetWaitPollInterval sets how often waiters look without a notification,
// until restore: a test that sets it long shows notifications wake them.
func SetWaitPollInterval(d time.Duration) (restore func()) {
	old := waitPollInterval.Swap(int64(d))
	return func() { waitPollInterval.Store(old) }
}

// RecordKindsEvery sets how often the worker records its kinds again; call
// it before Run.
func (w *Worker) RecordKindsEvery(d time.Duration) { w.maint.kinds.every = d }

// PromoteStep runs one step of the worker's promotion service.
func (w *Worker) PromoteStep(ctx context.Context) error { return w.maint.promote.step(ctx) }

// RescueStep runs one step of the worker's rescue services: other workers'
// orphans and expired leases, then this worker's own orphans.
func (w *Worker) RescueStep(ctx context.Context) error {
	if err := w.maint.rescue.step(ctx); err != nil {
		return err
	}
	return ownRescue{w.maint.rescue}.step(ctx)
}

// CancelStep runs one step of the worker's cancel-request service.
func (w *Worker) CancelStep(ctx context.Context) error { return w.maint.cancel.step(ctx) }

// RunAsAttempt registers attempt of job id as running in the worker, as a
// handler's is while it runs, and returns its context and the function that
// unregisters it.
func (w *Worker) RunAsAttempt(id JobID, attempt int) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	remove, _ := w.running.add(&Job{ID: id, Attempt: attempt}, cancel)
	return ctx, func() { remove(); cancel(nil) }
}

// LeaderStep runs one step of the worker's leader service, and
// LeaderResign resigns as the worker does when it stops.
func (w *Worker) LeaderStep(ctx context.Context)   { w.maint.leader.step(ctx) }
func (w *Worker) LeaderResign(ctx context.Context) { w.maint.leader.resign(ctx) }

// RetainStep runs one step of the worker's retention service.
func (w *Worker) RetainStep(ctx context.Context) { w.maint.retain.step(ctx) }

// PeriodicStep runs one step of the worker's periodic-job service.
func (w *Worker) PeriodicStep(ctx context.Context) { w.maint.periodic.step(ctx) }

// KindsStep runs one step of the worker's kinds-recording service.
func (w *Worker) KindsStep(ctx context.Context) { w.maint.kinds.step(ctx) }

// PrimePace makes the runners of queue judge kinds to take d, as if they
// had run them: their first claims take as many jobs as fit the queue's
// CommitBudget (up to BatchSize), and the batch commits between two such
// jobs only once the budget is spent. Call it before Run.
func (w *Worker) PrimePace(queue string, d time.Duration, kinds ...string) {
	q := w.queues[queue]
	for _, k := range kinds {
		for range paceWarm {
			q.pace.observe(k, d)
		}
	}
}

// SettleSnooze records, as a worker does, that attempt of job id, which the
// claim marked token took, snoozed for delay, and returns how many
// outcomes the database recorded (0 or 1).
func (w *Worker) SettleSnooze(ctx context.Context, id int64, attempt int32, token int64, delay time.Duration) (int32, error) {
	j, err := gen.New(w.pool).GetJob(ctx, id)
	if err != nil {
		return 0, err
	}
	row := gen.ClaimJobsRow{ID: j.ID, Queue: j.Queue, Kind: j.Kind, Attempts: attempt, MaxAttempts: j.MaxAttempts}
	o := outcome{row: row, reg: w.handler(j.Kind), start: time.Now(), err: Snooze(delay), claimToken: token}
	res, err := settleNow(ctx, w.pool, j.Queue, []outcome{o})
	return res.Recorded, err
}

// ProgressWrites counts the progress writes the worker has sent.
func (w *Worker) ProgressWrites() int64 { return w.progressWrites.Load() }

// EnqueuedAlone reports whether Enqueue sends a request, once checked, to
// pgtask.enqueue_job rather than to enqueue_jobs.
func EnqueuedAlone(r EnqueueRequest) (bool, error) {
	if err := r.check(); err != nil {
		return false, err
	}
	return r.plain(), nil
}
