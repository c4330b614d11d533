package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
)

// statuses are the job statuses, in the order of a job's life.
var statuses = []string{"scheduled", "queued", "started", "succeeded", "failed", "cancelled"}

// filter is what the jobs page's form selects.
type filter struct {
	Queue, Kind, Group, Status string
	// CreatedAfter and CreatedBefore as typed (a datetime-local value, UTC).
	CreatedAfter, CreatedBefore string
	after, before               time.Time
}

// parseTime reads a datetime-local input's value (with or without seconds)
// as UTC, or an RFC 3339 time.
func parseTime(s string) (time.Time, bool) {
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

// parseFilter reads a filter from a query or a form; the error says which
// field is wrong.
func parseFilter(v url.Values) (filter, error) {
	f := filter{
		Queue: v.Get("queue"), Kind: v.Get("kind"), Group: v.Get("group"), Status: v.Get("status"),
		CreatedAfter: v.Get("created_after"), CreatedBefore: v.Get("created_before"),
	}
	if f.Status != "" && !slices.Contains(statuses, f.Status) {
		return f, fmt.Errorf("status %q is none of %s", f.Status, strings.Join(statuses, ", "))
	}
	for _, t := range []struct {
		name, value string
		to          *time.Time
	}{{"created after", f.CreatedAfter, &f.after}, {"created before", f.CreatedBefore, &f.before}} {
		if t.value == "" {
			continue
		}
		at, ok := parseTime(t.value)
		if !ok {
			return f, fmt.Errorf("%s: %q is not a time like 2006-01-02T15:04 (UTC)", t.name, t.value)
		}
		*t.to = at
	}
	return f, nil
}

// Empty reports whether the filter selects every job.
func (f filter) Empty() bool {
	return f.Queue == "" && f.Kind == "" && f.Group == "" && f.Status == "" && f.after.IsZero() && f.before.IsZero()
}

// values is the filter as query parameters.
func (f filter) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"queue": f.Queue, "kind": f.Kind, "group": f.Group, "status": f.Status,
		"created_after": f.CreatedAfter, "created_before": f.CreatedBefore} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// jobFilter is the filter as the runtime's bulk operations take it.
func (f filter) jobFilter() runtime.JobFilter {
	jf := runtime.JobFilter{Queue: f.Queue, Kind: f.Kind, Group: f.Group, CreatedAfter: f.after, CreatedBefore: f.before}
	if f.Status != "" {
		jf.Statuses = []runtime.Status{runtime.Status(f.Status)}
	}
	return jf
}

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// jobRow is a job in a list.
type jobRow = gen.DashboardJobsByIDRow

// order is one of the orders the jobs page lists in.
type order int

const (
	byID     order = iota // newest first, along the primary key
	byFinish              // latest finished first, along the index of finished jobs
	byDue                 // due first, along the index of scheduled jobs
)

func (f filter) order() order {
	switch f.Status {
	case "succeeded", "failed", "cancelled":
		return byFinish
	case "scheduled":
		return byDue
	}
	return byID
}

// cursor is where a page of jobs starts: after (at, id) in the page's
// order. A zero cursor starts at the beginning.
type cursor struct {
	at time.Time
	id int64
}

func (c cursor) String() string {
	if c.at.IsZero() {
		return strconv.FormatInt(c.id, 10)
	}
	return strconv.FormatInt(c.at.UnixMicro(), 10) + "_" + strconv.FormatInt(c.id, 10)
}

func parseCursor(s string) (cursor, error) {
	if s == "" {
		return cursor{}, nil
	}
	at, id, timed := strings.Cut(s, "_")
	if !timed {
		id, at = at, ""
	}
	var c cursor
	var err error
	if c.id, err = strconv.ParseInt(id, 10, 64); err != nil {
		return c, fmt.Errorf("page cursor %q is not one this page made", s)
	}
	if timed {
		micros, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			return c, fmt.Errorf("page cursor %q is not one this page made", s)
		}
		c.at = time.UnixMicro(micros).UTC()
	}
	return c, nil
}

// listing is a page of jobs and where the next one starts.
type listing struct {
	Jobs []jobRow
	// Next is the next page's cursor; "" at the end.
	Next string
	// Stopped is true when the page is not full because it looked through
	// as many jobs as it may: the next page goes on looking.
	Stopped bool
}

// Far bounds of the time orders: run_after and finished_at lie between.
var (
	farPast   = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	farFuture = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// listJobs reads the page of jobs f matches from c on. It looks through
// at most h.bound.scan jobs along the order's index (the stretch up to the
// job that many steps on), and reads one more row than it shows to know
// whether another page follows.
func (h *handler) listJobs(ctx context.Context, f filter, c cursor) (listing, error) {
	var (
		rows []jobRow
		next func(jobRow) cursor
		end  cursor // the last job the stretch looks through
		more bool   // the order goes on after end
		err  error
	)
	steps := h.bound.scan - 1 // from the stretch's first job to its last
	switch f.order() {
	case byID:
		before := c.id
		if before == 0 {
			before = math.MaxInt64
		}
		end.id, err = h.q.DashboardJobsScanEndByID(ctx, gen.DashboardJobsScanEndByIDParams{BeforeID: before, Scan: steps})
		if more, err = found(err); err == nil {
			rows, err = h.q.DashboardJobsByID(ctx, gen.DashboardJobsByIDParams{
				BeforeID: before, ScanEnd: end.id, Queue: opt(f.Queue), Kind: opt(f.Kind), GroupKey: opt(f.Group),
				Status: opt(f.Status), CreatedAfter: optTime(f.after), CreatedBefore: optTime(f.before), Max: int32(h.bound.page) + 1,
			})
		}
		next = func(j jobRow) cursor { return cursor{id: j.ID} }
	case byFinish:
		before := cursor{at: farFuture, id: math.MaxInt64}
		if !c.at.IsZero() {
			before = c
		}
		var e gen.DashboardJobsScanEndByFinishRow
		e, err = h.q.DashboardJobsScanEndByFinish(ctx, gen.DashboardJobsScanEndByFinishParams{
			Status: gen.PgtaskJobStatus(f.Status), BeforeAt: before.at, BeforeID: before.id, Scan: steps})
		end = cursor{at: farPast}
		if more, err = found(err); more {
			end = cursor{at: e.EndAt, id: e.EndID}
		}
		if err == nil {
			var got []gen.DashboardJobsByFinishRow
			got, err = h.q.DashboardJobsByFinish(ctx, gen.DashboardJobsByFinishParams{
				Status: gen.PgtaskJobStatus(f.Status), BeforeAt: before.at, BeforeID: before.id, EndAt: end.at, EndID: end.id,
				Queue: opt(f.Queue), Kind: opt(f.Kind), GroupKey: opt(f.Group),
				CreatedAfter: optTime(f.after), CreatedBefore: optTime(f.before), Max: int32(h.bound.page) + 1,
			})
			rows = convertRows(got, func(r gen.DashboardJobsByFinishRow) jobRow { return jobRow(r) })
		}
		next = func(j jobRow) cursor { return cursor{at: *j.FinishedAt, id: j.ID} }
	case byDue:
		after := cursor{at: farPast}
		if !c.at.IsZero() {
			after = c
		}
		var e gen.DashboardJobsScanEndByDueRow
		e, err = h.q.DashboardJobsScanEndByDue(ctx, gen.DashboardJobsScanEndByDueParams{AfterAt: after.at, AfterID: after.id, Scan: steps})
		end = cursor{at: farFuture, id: math.MaxInt64}
		if more, err = found(err); more {
			end = cursor{at: e.EndAt, id: e.EndID}
		}
		if err == nil {
			var got []gen.DashboardJobsByDueRow
			got, err = h.q.DashboardJobsByDue(ctx, gen.DashboardJobsByDueParams{
				AfterAt: after.at, AfterID: after.id, EndAt: end.at, EndID: end.id,
				Queue: opt(f.Queue), Kind: opt(f.Kind), GroupKey: opt(f.Group),
				CreatedAfter: optTime(f.after), CreatedBefore: optTime(f.before), Max: int32(h.bound.page) + 1,
			})
			rows = convertRows(got, func(r gen.DashboardJobsByDueRow) jobRow { return jobRow(r) })
		}
		next = func(j jobRow) cursor { return cursor{at: j.RunAfter, id: j.ID} }
	}
	if err != nil {
		return listing{}, fmt.Errorf("list jobs: %w", err)
	}
	l := listing{Jobs: rows}
	switch {
	case len(rows) > h.bound.page:
		l.Jobs = rows[:h.bound.page]
		l.Next = next(rows[h.bound.page-1]).String()
	case more:
		l.Next, l.Stopped = end.String(), true
	}
	return l, nil
}

// found turns the no-row error of a scan-end query into false.
func found(err error) (bool, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func convertRows[T any](rows []T, conv func(T) jobRow) []jobRow {
	out := make([]jobRow, len(rows))
	for i, r := range rows {
		out[i] = conv(r)
	}
	return out
}

type jobsPage struct {
	page
	Filter   filter
	Statuses []string
	Error    string // what is wrong with the filter
	listing
	// Order says how the list is sorted.
	Order string
	// First is true on the first page.
	First bool
}

func (h *handler) jobsPage(w http.ResponseWriter, r *http.Request) {
	data := jobsPage{page: h.page(r, "jobs", "Jobs"), Statuses: statuses}
	f, err := parseFilter(r.URL.Query())
	data.Filter = f
	var c cursor
	if err == nil {
		c, err = parseCursor(r.URL.Query().Get("cursor"))
	}
	if err != nil {
		data.Error = err.Error()
		h.render(w, r, http.StatusBadRequest, "jobs", data)
		return
	}
	data.First = c == cursor{}
	data.Order = map[order]string{byID: "newest first", byFinish: "latest finished first", byDue: "due first"}[f.order()]
	if data.listing, err = h.listJobs(r.Context(), f, c); err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "jobs", data)
}

// Link is the jobs page with this filter from cursor c on ("" for the
// first page).
func (f filter) Link(base, c string) string {
	v := f.values()
	if c != "" {
		v.Set("cursor", c)
	}
	return base + "/jobs" + querySuffix(v.Encode())
}

type jobPage struct {
	page
	Job     *runtime.JobInfo
	Payload string
	Result  string
	// Attempts are the job's failed attempts, the latest first.
	Attempts []runtime.AttemptError
	// CanRetry and CanCancel say which actions the job's status allows
	// (a running job's cancel asks its worker to stop the attempt).
	CanRetry, CanCancel bool
	// Metadata is what the job was enqueued with, by key.
	Metadata [][2]string
	// Progress is what the job's attempts last reported, nil for none;
	// Percent is its percent for the page, ProgressValue its value laid out.
	Progress      *runtime.JobProgress
	Percent       string
	ProgressValue string
	// Limit is the concurrency limit the job counts against, nil for none.
	Limit *runtime.JobLimit
	// Parents are a workflow step's parents.
	Parents []runtime.Parent
}

func (h *handler) jobPage(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		http.Error(w, fmt.Sprintf("404 Not Found: %q is not a job id", r.PathValue("id")), http.StatusNotFound)
		return
	}
	job, err := runtime.GetJob(r.Context(), h.db, runtime.JobID(id))
	if errors.Is(err, runtime.ErrJobNotFound) {
		http.Error(w, fmt.Sprintf("404 Not Found: there is no job %d (retention may have deleted it)", id), http.StatusNotFound)
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	progress, err := runtime.GetJobProgress(r.Context(), h.db, job.ID)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		// Insufficient privilege: a dashboard on the producer role reads
		// jobs but not their progress. Show the rest.
		progress, err = nil, nil
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	limit, err := runtime.GetJobLimit(r.Context(), h.db, job.ID)
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		// The producer role does not read the limits either.
		limit, err = nil, nil
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var parents []runtime.Parent
	if job.WorkflowID != 0 {
		parents, err = runtime.JobParents(r.Context(), h.db, job.ID)
		if errors.As(err, &pgErr) && pgErr.Code == "42501" {
			// The producer role does not read a workflow's dependencies.
			parents, err = nil, nil
		}
		if err != nil {
			h.fail(w, r, err)
			return
		}
	}
	p := jobPage{
		Parents: parents,
		page:    h.page(r, "jobs", fmt.Sprintf("Job %d", id)), Job: job,
		Payload: indentJSON(job.Payload), Result: indentJSON(job.Result), Attempts: latestFirst(job.Errors),
		CanRetry:  job.Status == runtime.StatusFailed || job.Status == runtime.StatusCancelled,
		CanCancel: !job.Status.Finished() || job.Status == runtime.StatusFailed,
		Metadata:  sortedMetadata(job.Metadata),
		Progress:  progress,
		Limit:     limit,
	}
	if progress != nil {
		p.Percent = strconv.FormatFloat(progress.Percent, 'f', -1, 64)
		p.ProgressValue = indentJSON(progress.Value)
	}
	h.render(w, r, http.StatusOK, "job", p)
}

func sortedMetadata(m map[string]string) [][2]string {
	out := make([][2]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, [2]string{k, m[k]})
	}
	return out
}

func latestFirst(errs []runtime.AttemptError) []runtime.AttemptError {
	out := slices.Clone(errs)
	slices.Reverse(out)
	return out
}

// indentJSON lays out JSON for reading; "" for none.
func indentJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}
