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
// the flash that says what it did, with its numbers n and m (m 0: a flash
// with one number): a page of this dashboard only, else the queues page.
func (h *handler) redirectBack(w http.ResponseWriter, r *http.Request, done string, n, m int64) {
	page, q, ok := backPage(r.PostForm.Get(backField))
	if !ok {
		page, q = "/", url.Values{}
	}
	q = withoutFlash(q)
	q.Set("done", done)
	q.Set("n", strconv.FormatInt(n, 10))
	if m != 0 {
		q.Set("m", strconv.FormatInt(m, 10))
	}
	to := url.URL{Path: h.base + page, RawQuery: q.Encode()}
	http.Redirect(w, r, to.String(), http.StatusSeeOther)
}

// backPage reads back as one of the dashboard's pages below the base path
// ("/", "/jobs", "/jobs/{id}", "/groups", "/limits", "/tenants") and its query.
// Anything else is refused: a URL with a scheme, a host or a fragment, a
// path that decodes to "//host" or holds a backslash or a control
// character (which browsers read as another site), or a path of no page.
func backPage(back string) (page string, q url.Values, ok bool) {
	if strings.ContainsFunc(back, func(c rune) bool { return c == '\\' || c < 0x20 || c == 0x7f }) {
		return "", nil, false
	}
	u, err := url.Parse(back)
	if err != nil || u.Scheme != "" || u.Opaque != "" || u.User != nil || u.Host != "" || u.Fragment != "" || strings.HasPrefix(back, "//") {
		return "", nil, false
	}
	if !dashboardPage(u.Path) || u.RawPath != "" && u.RawPath != u.Path {
		return "", nil, false
	}
	q, err = url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", nil, false
	}
	return u.Path, q, true
}

// dashboardPage reports whether p is the path of a page, below the base.
func dashboardPage(p string) bool {
	switch p {
	case "/", "/jobs", "/groups", "/limits", "/tenants":
		return true
	}
	id, ok := strings.CutPrefix(p, "/jobs/")
	return ok && id != "" && strings.Trim(id, "0123456789") == "" && len(id) <= 19
}

// jobAction runs a change to the job in the path, which returns the flash
// that says what it did, and the other job that flash names, if any.
func (h *handler) jobAction(w http.ResponseWriter, r *http.Request, what string, do func(context.Context, runtime.JobID) (string, int64, error)) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		http.Error(w, "400 Bad Request: "+strconv.Quote(r.PathValue("id"))+" is not a job id", http.StatusBadRequest)
		return
	}
	done, other, err := do(r.Context(), runtime.JobID(id))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "pgtask dashboard: "+what+" job", "job", id, "outcome", done, "user", authUser(r))
	h.redirectBack(w, r, done, id, other)
}

func (h *handler) retryJob(w http.ResponseWriter, r *http.Request) {
	h.jobAction(w, r, "retry", func(ctx context.Context, id runtime.JobID) (string, int64, error) {
		ok, err := runtime.RetryJob(ctx, h.db, id)
		// A unique key another job holds now is the job's state, not a
		// failure of the dashboard's: the page names the job that holds it.
		if conflict := (*runtime.RetryConflict)(nil); errors.As(err, &conflict) {
			return "not-retried-unique", int64(conflict.HeldBy), nil
		}
		return map[bool]string{true: "retried", false: "not-retried"}[ok], 0, err
	})
}

// cancelJob cancels a job; for a running one, that asks its worker to
// cancel the attempt, which the flash says.
func (h *handler) cancelJob(w http.ResponseWriter, r *http.Request) {
	h.jobAction(w, r, "cancel", func(ctx context.Context, id runtime.JobID) (string, int64, error) {
		job, err := runtime.GetJob(ctx, h.db, id)
		running := err == nil && job.Status == runtime.StatusStarted
		ok, err := runtime.CancelJob(ctx, h.db, id)
		switch {
		case err != nil || !ok:
			return "not-cancelled", 0, err
		case running:
			return "cancel-asked", 0, nil
		}
		return "cancelled", 0, nil
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
	// Jobs whose unique keys other jobs hold now are left as they are; the
	// rest were retried, and the page says how many of each.
	var conflicts *runtime.RetryConflictsError
	if errors.As(err, &conflicts) {
		h.log.InfoContext(r.Context(), "pgtask dashboard: "+what+" jobs", "filter", f.values().Encode(), "changed", n, "unique_key_held", len(conflicts.Conflicts), "user", authUser(r))
		h.redirectBack(w, r, what+"-many-held", int64(n), int64(len(conflicts.Conflicts)))
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "pgtask dashboard: "+what+" jobs", "filter", f.values().Encode(), "changed", n, "user", authUser(r))
	h.redirectBack(w, r, what+"-many", int64(n), 0)
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
	h.redirectBack(w, r, done, 0, 0)
}

func (h *handler) pauseQueue(w http.ResponseWriter, r *http.Request) {
	h.queueAction(w, r, "paused", runtime.PauseQueue)
}

func (h *handler) resumeQueue(w http.ResponseWriter, r *http.Request) {
	h.queueAction(w, r, "resumed", runtime.ResumeQueue)
}
