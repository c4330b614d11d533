package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pgtask/pgtask/gen"
)

// ErrJobCancelled is the cause (context.Cause) of a handler's context when
// an operator cancelled its running job: CancelJob, CancelJobs or `pgtask
// cancel`. A handler that returns an error then ends the job cancelled; one
// that succeeds anyway succeeds. A workflow's step cancelled with its
// workflow gets a cause worded by what cancelled the workflow (an
// operator's CancelWorkflowByID, or the failure of a step under
// AfterOrCancelWorkflow), which errors.Is matches to ErrJobCancelled too.
var ErrJobCancelled = errors.New("pgtask: job cancelled by an operator")

// workflowCancelled is ErrJobCancelled worded by its workflow's cancel.
type workflowCancelled struct {
	// failedStep is the place (from 0, Step.Index) of the step whose
	// failure cancelled the workflow, or -1 for an operator's cancel.
	failedStep int
}

func (e workflowCancelled) Error() string {
	if e.failedStep < 0 {
		return "pgtask: job cancelled with its workflow by an operator"
	}
	return fmt.Sprintf("pgtask: job cancelled with its workflow (step %d failed)", e.failedStep)
}

// Is makes it match ErrJobCancelled.
func (e workflowCancelled) Is(target error) bool { return target == ErrJobCancelled }

// cancelCause is the cause of a cancel as a cancel request records it (see
// pgtask.cancel_requests.cause): "operator" for an operator's cancel of
// the job, "workflow" for an operator's cancel of its workflow, "step:N"
// for its workflow's cancel by the failure of step N. A cause it does not
// know is taken for an operator's.
func cancelCause(cause string) error {
	if cause == "workflow" {
		return workflowCancelled{failedStep: -1}
	}
	if n, ok := strings.CutPrefix(cause, "step:"); ok {
		if step, err := strconv.Atoi(n); err == nil && step >= 0 {
			return workflowCancelled{failedStep: step}
		}
	}
	return ErrJobCancelled
}

// attemptRef names one attempt of a job.
type attemptRef struct {
	id      JobID
	attempt int
}

// earlyCancelTTL is how long a cancel notification for an attempt whose
// handler has not started here is kept, in case it starts here: a job of a
// held batch waits for the jobs before it.
const earlyCancelTTL = time.Minute

// maxEarlyCancels bounds the notifications kept for attempts not running
// here; every worker hears every one.
const maxEarlyCancels = 10_000

// runningJobs are the attempts whose handlers run in this worker, so that a
// cancel request can reach the one it names, and the cancels heard for
// attempts that may yet start here.
type runningJobs struct {
	mu    sync.Mutex
	m     map[JobID]runningAttempt
	early map[attemptRef]time.Time
}

type runningAttempt struct {
	attempt int
	cancel  context.CancelCauseFunc
}

// add registers a running attempt and returns the function that
// unregisters it, and whether a cancel for the attempt was heard before it
// started.
func (r *runningJobs) add(job *Job, cancel context.CancelCauseFunc) (remove func(), heard bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[JobID]runningAttempt)
	}
	r.m[job.ID] = runningAttempt{attempt: job.Attempt, cancel: cancel}
	ref := attemptRef{job.ID, job.Attempt}
	if _, heard = r.early[ref]; heard {
		delete(r.early, ref)
	}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if a, ok := r.m[job.ID]; ok && a.attempt == job.Attempt {
			delete(r.m, job.ID)
		}
	}, heard
}

// cancel cancels the handler of attempt ref, if it runs here, with cause
// (see cancelCause).
func (r *runningJobs) cancel(ref attemptRef, cause error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok := r.m[ref.id]; ok && a.attempt == ref.attempt {
		a.cancel(cause)
		return true
	}
	return false
}

// hear reports whether attempt ref runs here and, if it does not, keeps
// the cancel heard for it for earlyCancelTTL, in case it starts here: one
// step, so that an attempt starting meanwhile either finds the cancel kept
// or is reported running.
func (r *runningJobs) hear(ref attemptRef) (running bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok := r.m[ref.id]; ok && a.attempt == ref.attempt {
		return true
	}
	now := time.Now()
	if r.early == nil {
		r.early = make(map[attemptRef]time.Time)
	}
	if len(r.early) >= maxEarlyCancels {
		for k, at := range r.early {
			if now.Sub(at) > earlyCancelTTL {
				delete(r.early, k)
			}
		}
	}
	if len(r.early) < maxEarlyCancels {
		r.early[ref] = now
	}
	return false
}

// attempts lists the running attempts.
func (r *runningJobs) attempts() []attemptRef {
	r.mu.Lock()
	defer r.mu.Unlock()
	refs := make([]attemptRef, 0, len(r.m))
	for id, a := range r.m {
		refs = append(refs, attemptRef{id, a.attempt})
	}
	return refs
}

// parseCancel reads a "pgtask_cancel" notification: "id:attempt".
func parseCancel(payload string) (attemptRef, bool) {
	idText, attemptText, ok := strings.Cut(payload, ":")
	if !ok {
		return attemptRef{}, false
	}
	id, err1 := strconv.ParseInt(idText, 10, 64)
	attempt, err2 := strconv.Atoi(attemptText)
	if err1 != nil || err2 != nil || attempt < 1 {
		return attemptRef{}, false
	}
	return attemptRef{JobID(id), attempt}, true
}

// cancelNotified cancels the attempt a "pgtask_cancel" notification names,
// once the database confirms the request: any session may NOTIFY, only an
// operator's cancel_job files a request. A notification for an attempt not
// running here is kept, and confirmed if the attempt starts here.
func (w *Worker) cancelNotified(ctx context.Context, payload string) {
	ref, ok := parseCancel(payload)
	if !ok {
		w.log.Warn("pgtask: ignoring a cancel notification that names no attempt", "payload", payload)
		return
	}
	if !w.running.hear(ref) {
		return
	}
	go w.maint.cancel.confirm(ctx, ref)
}

// canceller carries out operators' cancel requests. Every maintenance
// round it settles the requests whose attempt is over (see
// pgtask.apply_cancel_requests) and cancels the running attempts of this
// worker that have a request: the fallback for notifications lost while
// the listener was down. A notification heard (see Worker.cancelNotified)
// is confirmed at once (confirm).
type canceller struct {
	q     *gen.Queries
	log   *slog.Logger
	batch int32
	// running are the attempts whose handlers run in this worker.
	running *runningJobs
}

func (c *canceller) step(ctx context.Context) error {
	if _, err := c.q.ApplyCancelRequests(ctx, c.batch); err != nil {
		return err
	}
	refs := c.running.attempts()
	if len(refs) == 0 {
		return nil
	}
	return c.cancelRequested(ctx, refs)
}

// confirm cancels attempt ref, running here, if the database shows an
// operator's request for it. Failing to ask, it leaves the attempt to
// the next step, which asks again.
func (c *canceller) confirm(ctx context.Context, ref attemptRef) {
	ctx, cancel := context.WithTimeout(ctx, bookkeeping)
	defer cancel()
	if err := c.cancelRequested(ctx, []attemptRef{ref}); err != nil {
		c.log.Warn("pgtask: could not check a cancel notification; maintenance will", "job_id", ref.id, "error", err)
	}
}

// cancelRequested cancels those of the attempts refs, running here, that a
// cancel request asks to stop (an operator's, or its workflow's cancel); it
// returns the error of asking the database.
// An attempt that ended meanwhile is left alone.
func (c *canceller) cancelRequested(ctx context.Context, refs []attemptRef) error {
	p := gen.CancelRequestedParams{Ids: make([]int64, len(refs)), Attempts: make([]int32, len(refs))}
	for i, ref := range refs {
		p.Ids[i], p.Attempts[i] = int64(ref.id), int32(ref.attempt)
	}
	requested, err := c.q.CancelRequested(ctx, p)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		i := slices.IndexFunc(requested, func(r gen.CancelRequestedRow) bool { return r.ID == int64(ref.id) })
		if i < 0 {
			continue
		}
		if cause := cancelCause(requested[i].Cause); c.running.cancel(ref, cause) {
			c.log.Info("pgtask: cancelling a running job", "job_id", ref.id, "attempt", ref.attempt, "cause", cause)
		}
	}
	return nil
}
