package runtime

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/pgtask/pgtask/gen"
)

// ErrJobCancelled is the cause (context.Cause) of a handler's context when
// an operator cancelled its running job: CancelJob, CancelJobs or `pgtask
// cancel`. A handler that returns an error then ends the job cancelled; one
// that succeeds anyway succeeds.
var ErrJobCancelled = errors.New("pgtask: job cancelled by an operator")

// runningJobs are the attempts whose handlers run in this worker, so that a
// cancel request can reach the one it names.
type runningJobs struct {
	mu sync.Mutex
	m  map[JobID]runningAttempt
}

type runningAttempt struct {
	attempt int
	cancel  context.CancelCauseFunc
}

// add registers a running attempt; the returned function unregisters it.
func (r *runningJobs) add(job *Job, cancel context.CancelCauseFunc) func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[JobID]runningAttempt)
	}
	r.m[job.ID] = runningAttempt{attempt: job.Attempt, cancel: cancel}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if a, ok := r.m[job.ID]; ok && a.attempt == job.Attempt {
			delete(r.m, job.ID)
		}
	}
}

// cancel cancels the handler of job id's attempt, if it runs here; attempt
// 0 matches any attempt.
func (r *runningJobs) cancel(id JobID, attempt int) bool {
	r.mu.Lock()
	a, ok := r.m[id]
	r.mu.Unlock()
	if !ok || (attempt != 0 && a.attempt != attempt) {
		return false
	}
	a.cancel(ErrJobCancelled)
	return true
}

func (r *runningJobs) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

// cancelNotified cancels the job a "pgtask_cancel" notification names.
func (w *Worker) cancelNotified(payload string) {
	id, err := strconv.ParseInt(payload, 10, 64)
	if err != nil {
		w.log.Warn("pgtask: ignoring a cancel notification that names no job", "payload", payload)
		return
	}
	if w.running.cancel(JobID(id), 0) {
		w.log.Info("pgtask: cancelling a running job at an operator's request", "job_id", id)
	}
}

// cancelPending cancels the running attempts of this worker that have a
// cancel request: the fallback for notifications lost while the listener
// was down.
func (w *Worker) cancelPending(ctx context.Context, q *gen.Queries) error {
	if w.running.len() == 0 {
		return nil
	}
	reqs, err := q.PendingCancels(ctx, maintainBatch)
	if err != nil {
		return err
	}
	for _, r := range reqs {
		if w.running.cancel(JobID(r.JobID), int(r.Attempt)) {
			w.log.Info("pgtask: cancelling a running job at an operator's request", "job_id", r.JobID)
		}
	}
	return nil
}
