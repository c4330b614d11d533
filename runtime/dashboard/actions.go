package dashboard

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/pgtask/pgtask/runtime"
)

// backField is the form field that says which page an action returns to:
// a path and query below the base path.
const backField = "back"

// redirectBack answers an action with a 303 to the page it came from, with
// the flash that says what it did.
func (h *handler) redirectBack(w http.ResponseWriter, r *http.Request, done string, n int64) {
	back := r.PostForm.Get(backField)
	if !localPath(back) {
		back = "/"
	}
	u, err := url.Parse(back)
	if err != nil {
		u = &url.URL{Path: "/"}
	}
	q := withoutFlash(u.Query())
	q.Set("done", done)
	q.Set("n", strconv.FormatInt(n, 10))
	http.Redirect(w, r, h.base+u.Path+"?"+q.Encode(), http.StatusSeeOther)
}

// localPath reports whether back is a path of this site (not "//host" or
// a URL with a scheme), so that a form cannot send the browser elsewhere.
func localPath(back string) bool {
	if !strings.HasPrefix(back, "/") || strings.HasPrefix(back, "//") || strings.HasPrefix(back, "/\\") {
		return false
	}
	u, err := url.Parse(back)
	return err == nil && u.Scheme == "" && u.Host == "" && u.User == nil
}

// jobAction runs a change to the job in the path, which returns the flash
// that says what it did.
func (h *handler) jobAction(w http.ResponseWriter, r *http.Request, what string, do func(context.Context, runtime.JobID) (string, error)) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		http.Error(w, "400 Bad Request: "+strconv.Quote(r.PathValue("id"))+" is not a job id", http.StatusBadRequest)
		return
	}
	done, err := do(r.Context(), runtime.JobID(id))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "pgtask dashboard: "+what+" job", "job", id, "outcome", done, "user", authUser(r))
	h.redirectBack(w, r, done, id)
}

func (h *handler) retryJob(w http.ResponseWriter, r *http.Request) {
	h.jobAction(w, r, "retry", func(ctx context.Context, id runtime.JobID) (string, error) {
		ok, err := runtime.RetryJob(ctx, h.db, id)
		return map[bool]string{true: "retried", false: "not-retried"}[ok], err
	})
}

// cancelJob cancels a job; for a running one, that asks its worker to
// cancel the attempt, which the flash says.
func (h *handler) cancelJob(w http.ResponseWriter, r *http.Request) {
	h.jobAction(w, r, "cancel", func(ctx context.Context, id runtime.JobID) (string, error) {
		job, err := runtime.GetJob(ctx, h.db, id)
		running := err == nil && job.Status == runtime.StatusStarted
		ok, err := runtime.CancelJob(ctx, h.db, id)
		switch {
		case err != nil || !ok:
			return "not-cancelled", err
		case running:
			return "cancel-asked", nil
		}
		return "cancelled", nil
	})
}

// bulkAction runs a change to every job the form's filter matches. An
// empty filter is refused: acting on every job takes the CLI's -all.
func (h *handler) bulkAction(w http.ResponseWriter, r *http.Request, what string,
	do func(context.Context, runtime.DB, runtime.JobFilter, runtime.Progress) (int, error)) {
	f, err := parseFilter(r.PostForm)
	if err == nil && f.Empty() {
		err = errEmptyFilter
	}
	if err != nil {
		http.Error(w, "400 Bad Request: "+err.Error(), http.StatusBadRequest)
		return
	}
	n, err := do(r.Context(), h.db, f.jobFilter(), nil)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "pgtask dashboard: "+what+" jobs", "filter", f.values().Encode(), "changed", n, "user", authUser(r))
	h.redirectBack(w, r, what+"-many", int64(n))
}

var errEmptyFilter = errors.New("no filter: choose a queue, kind, group, status or time first (`pgtask retry -all` acts on every job)")

func (h *handler) retryMatching(w http.ResponseWriter, r *http.Request) {
	h.bulkAction(w, r, "retried", runtime.RetryJobs)
}

func (h *handler) cancelMatching(w http.ResponseWriter, r *http.Request) {
	h.bulkAction(w, r, "cancelled", runtime.CancelJobs)
}

// queueAction pauses or resumes the queue the form names.
func (h *handler) queueAction(w http.ResponseWriter, r *http.Request, what string, do func(context.Context, runtime.DB, string) (bool, error)) {
	queue := r.PostForm.Get("queue")
	if queue == "" {
		http.Error(w, "400 Bad Request: the form names no queue", http.StatusBadRequest)
		return
	}
	changed, err := do(r.Context(), h.db, queue)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "pgtask dashboard: "+what+" queue", "queue", queue, "changed", changed, "user", authUser(r))
	done := what
	if !changed {
		done = map[string]string{"paused": "was-paused", "resumed": "was-running"}[what]
	}
	h.redirectBack(w, r, done, 0)
}

func (h *handler) pauseQueue(w http.ResponseWriter, r *http.Request) {
	h.queueAction(w, r, "paused", runtime.PauseQueue)
}

func (h *handler) resumeQueue(w http.ResponseWriter, r *http.Request) {
	h.queueAction(w, r, "resumed", runtime.ResumeQueue)
}
