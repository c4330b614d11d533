package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/dashboard"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// The queues page counts each queue's jobs by status, its blocked groups,
// and the last hour's and minute's finished jobs.
func TestQueuesPage(t *testing.T) {
	t.Parallel()
	s := seed(t)
	c := newDashboard(t, s, dashboard.Options{})
	body := c.get("/")
	head := []string{"Queue", "State", "Scheduled", "Runnable", "In groups", "On a limit", "On a rate", "Running", "Oldest wait", "Blocked groups",
		"Finished", "Succeeded", "Failed", "Cancelled", ""}
	if got := rows(body)[1]; !slices.Equal(got, head) {
		t.Errorf("header %q, want %q", got, head)
	}
	emails := []string{"emails", "running", "1", "0", "0", "0", "0", "0", "–", "0", "3", "1", "2", "0", "Pause"}
	if got := row(body, "emails"); !slices.Equal(got, emails) {
		t.Errorf("emails row %q, want %q", got, emails)
	}
	reports := row(body, "reports")
	want := []string{"reports", "running", "0", "1", "1", "0", "0", "0", "?", "1", "1", "0", "1", "0", "Pause"}
	if len(reports) != len(want) || reports[8] == "–" {
		t.Fatalf("reports row %q, want %q with an oldest wait", reports, want)
	}
	reports[8] = "?"
	if !slices.Equal(reports, want) {
		t.Errorf("reports row %q, want %q", reports, want)
	}
	// No worker runs: the runnable job of reports is of a kind no live
	// worker handles, and waits for one.
	if want := "Runnable jobs of kinds no live worker handles (among the next 100 in line of each queue): reports: build_report (1)."; !strings.Contains(text(body), want) {
		t.Errorf("queues page lacks %q", want)
	}
	for _, link := range []string{`href="/jobs?queue=emails&amp;status=failed"`, `href="/groups?queue=reports"`, `href="/jobs?queue=reports&amp;status=queued"`} {
		if !strings.Contains(body, link) {
			t.Errorf("queues page lacks the link %s", link)
		}
	}
}

// ids is the first column of a jobs table, the job ids.
func ids(body string) []string {
	var out []string
	for _, r := range rows(body)[1:] {
		out = append(out, r[0])
	}
	return out
}

func idStrings(js ...runtime.JobID) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = fmt.Sprint(j)
	}
	return out
}

// The jobs page lists newest first and filters by queue, kind, group,
// status and creation time; finished statuses list latest finished first,
// scheduled ones due first.
func TestJobsPageFilters(t *testing.T) {
	t.Parallel()
	s := seed(t)
	c := newDashboard(t, s, dashboard.Options{})
	for _, tc := range []struct {
		query string
		want  []runtime.JobID
	}{
		{"", []runtime.JobID{s.fresh, s.behind, s.later, s.blocker, s.crashed, s.bounced, s.sent}},
		{"?queue=reports", []runtime.JobID{s.fresh, s.behind, s.blocker}},
		{"?kind=build_report&group=acct-1", []runtime.JobID{s.behind, s.blocker}},
		{"?status=queued", []runtime.JobID{s.fresh, s.behind}},
		{"?status=failed", []runtime.JobID{s.blocker, s.crashed, s.bounced}},
		{"?status=failed&queue=emails", []runtime.JobID{s.crashed, s.bounced}},
		{"?status=succeeded", []runtime.JobID{s.sent}},
		{"?status=scheduled", []runtime.JobID{s.later}},
		{"?status=cancelled", nil},
		{"?created_after=2999-01-01T00:00", nil},
		{"?created_before=2999-01-01T00:00&queue=emails", []runtime.JobID{s.later, s.crashed, s.bounced, s.sent}},
	} {
		body := c.get("/jobs" + tc.query)
		var got []string
		if strings.Contains(body, "<tbody>") {
			got = ids(body)
		} else if !strings.Contains(body, "No job matches.") {
			t.Errorf("jobs%s: neither a table nor “No job matches.”", tc.query)
		}
		if want := idStrings(tc.want...); !slices.Equal(got, want) {
			t.Errorf("jobs%s: ids %v, want %v", tc.query, got, want)
		}
	}
	body := c.get("/jobs?status=failed&queue=emails")
	bounced := row(body, fmt.Sprint(s.bounced))
	if want := []string{fmt.Sprint(s.bounced), "emails", "send_email", "", "failed", "1/20"}; !slices.Equal(bounced[:6], want) ||
		bounced[len(bounced)-1] != "smtp: 550 mailbox unavailable" {
		t.Errorf("bounced job's row %q, want %q … and its error", bounced, want)
	}
	resp, body := c.getStatus("/jobs?status=lost")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(text(body), `status "lost" is none of scheduled, queued, started`) {
		t.Errorf("a wrong status: %s %q", resp.Status, text(body))
	}
	resp, body = c.getStatus("/jobs?created_after=yesterday")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(text(body), "is not a time like 2006-01-02T15:04 (UTC)") {
		t.Errorf("a wrong time: %s %q", resp.Status, text(body))
	}
}

// A job's page shows its settings, payload, result, the progress its
// attempt last reported, timeline, and each failed attempt's error and
// stack.
func TestJobPage(t *testing.T) {
	t.Parallel()
	s := seed(t)
	c := newDashboard(t, s, dashboard.Options{})
	crashed := text(c.get(fmt.Sprintf("/jobs/%d", s.crashed)))
	for _, want := range []string{
		fmt.Sprintf("Job %d send_email failed", s.crashed), "Queue emails", "Group none", "Attempts 1 of 1", "Snoozes 0",
		"Metadata request_id=r-42 tenant=acme",
		`"to": "crash@example.com"`, "Attempt 1 panic", "template missing", "Stack goroutine", "Created 20", "Finished 20",
		"Retry Cancel",
	} {
		if !strings.Contains(crashed, want) {
			t.Errorf("crashed job's page lacks %q:\n%s", want, crashed)
		}
	}
	if strings.Contains(crashed, "<dt>Batch</dt>") {
		t.Errorf("a job of no batch names one:\n%s", crashed)
	}
	bid, inBatch, err := runtime.EnqueueBatch(context.Background(), s.pool, []runtime.EnqueueRequest{{Kind: "import_row", Payload: []byte(`{}`),
		EnqueueOptions: runtime.EnqueueOptions{Queue: "imports"}}}, runtime.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if page := text(c.get(fmt.Sprintf("/jobs/%d", inBatch[0]))); !strings.Contains(page, fmt.Sprintf("Batch %d", bid)) {
		t.Errorf("a batch's job's page does not name its batch %d:\n%s", bid, page)
	}
	sent := text(c.get(fmt.Sprintf("/jobs/%d", s.sent)))
	for _, want := range []string{"Result { \"message_id\": \"m-1\" }", "Failed attempts None.", "Attempts 1 of 20 Snoozes 1"} {
		if !strings.Contains(sent, want) {
			t.Errorf("sent job's page lacks %q:\n%s", want, sent)
		}
	}
	if strings.Contains(sent, "Retry") || strings.Contains(sent, "Cancel") {
		t.Errorf("a succeeded job offers an action:\n%s", sent)
	}
	if !strings.Contains(sent, "Priority 0 ") || strings.Contains(sent, "waited") {
		t.Errorf("a priority-0 job's page says how it ages:\n%s", sent)
	}
	// How a job's priority ages: per how long a level, or strict. Jobs of
	// a queue no other page reads.
	for _, tc := range []struct {
		aging time.Duration
		want  string
	}{{2 * time.Second, "Priority 3 a level better per 2s waited"}, {runtime.StrictPriority, "Priority 3 strict: it does not age"}} {
		id, err := runtime.Enqueue(context.Background(), s.pool, runtime.EnqueueRequest{Kind: "k", Payload: []byte(`{}`),
			EnqueueOptions: runtime.EnqueueOptions{Queue: "aging", Priority: 3, Aging: tc.aging}})
		if err != nil {
			t.Fatal(err)
		}
		if page := text(c.get(fmt.Sprintf("/jobs/%d", id))); !strings.Contains(page, tc.want) {
			t.Errorf("job page lacks %q:\n%s", tc.want, page)
		}
	}
	if strings.Contains(sent, "Progress") {
		t.Errorf("a job that reported no progress shows some:\n%s", sent)
	}
	bouncedBody := c.get(fmt.Sprintf("/jobs/%d", s.bounced))
	bounced := text(bouncedBody)
	for _, want := range []string{"Progress 37.5% waiting for the mail server reported by attempt 1,", `{ "tries": 3 }`} {
		if !strings.Contains(bounced, want) {
			t.Errorf("the page of a job that reported progress lacks %q:\n%s", want, bounced)
		}
	}
	if strings.Contains(bounced, "attempts so far") {
		t.Errorf("the page of a job whose only attempt reported progress counts its attempts apart:\n%s", bounced)
	}
	if !strings.Contains(bouncedBody, `<progress max="100" value="37.5">`) {
		t.Errorf("the page of a job that reported progress has no progress bar:\n%s", bouncedBody)
	}
	behind := text(c.get(fmt.Sprintf("/jobs/%d", s.behind)))
	if !strings.Contains(behind, "Group acct-1") || !strings.Contains(behind, "Last started not started") {
		t.Errorf("waiting job's page:\n%s", behind)
	}
	for _, path := range []string{"/jobs/999999", "/jobs/x"} {
		if resp, body := c.getStatus(path); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %s %q, want 404", path, resp.Status, body)
		}
	}
}

// The groups page lists blocked groups with their failed head, or every
// group with unfinished work.
func TestGroupsPage(t *testing.T) {
	t.Parallel()
	s := seed(t)
	c := newDashboard(t, s, dashboard.Options{})
	body := c.get("/groups")
	got := rows(body)[1:]
	want := [][]string{{"reports", "acct-1", fmt.Sprint(s.blocker), "build_report", "failed", "1/1", "?", "1", "report source offline", "Retry head Cancel head"}}
	if len(got) == 1 && len(got[0]) == len(want[0]) {
		got[0][6] = "?" // when it failed
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("blocked groups %q, want %q", got, want)
	}
	all := rows(c.get("/groups?show=all"))[1:]
	if len(all) != 2 || all[0][1] != "acct-1" || all[1][1] != "acct-2" || all[1][2] != fmt.Sprint(s.fresh) || all[1][4] != "queued" || all[1][7] != "1" {
		t.Errorf("all groups %q", all)
	}
	if body := text(c.get("/groups?queue=emails")); !strings.Contains(body, "No group is blocked in queue emails.") {
		t.Errorf("blocked groups of emails: %s", body)
	}
}

// Actions change the job or queue and redirect back with what they did.
func TestActions(t *testing.T) {
	t.Parallel()
	s := seed(t)
	c := newDashboard(t, s, dashboard.Options{})
	ctx := context.Background()
	tok := c.token("/jobs?status=failed")
	form := func(kv ...string) url.Values {
		v := url.Values{"csrf": {tok}, "back": {"/jobs?status=failed"}}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	redirect := func(what string, resp *http.Response, body, wantDone string) {
		t.Helper()
		loc, _ := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusSeeOther || loc.Path != "/jobs" || loc.Query().Get("done") != wantDone || loc.Query().Get("status") != "failed" {
			t.Fatalf("%s: %s, Location %q, %q; want 303 to /jobs?status=failed with done=%s", what, resp.Status, loc, body, wantDone)
		}
	}

	resp, body := c.post(fmt.Sprintf("/jobs/%d/retry", s.bounced), form())
	redirect("retry a failed job", resp, body, "retried")
	if st := s.status(t, s.bounced); st != runtime.StatusQueued {
		t.Errorf("retried job is %s, want queued", st)
	}
	if page := text(c.get(resp.Header.Get("Location"))); !strings.Contains(page, fmt.Sprintf("Job #%d is back in line", s.bounced)) {
		t.Errorf("the page after the retry says no such thing:\n%s", page)
	}
	resp, body = c.post(fmt.Sprintf("/jobs/%d/retry", s.sent), form())
	redirect("retry a succeeded job", resp, body, "not-retried")
	resp, body = c.post(fmt.Sprintf("/jobs/%d/cancel", s.later), form())
	redirect("cancel a scheduled job", resp, body, "cancelled")
	if st := s.status(t, s.later); st != runtime.StatusCancelled {
		t.Errorf("cancelled job is %s", st)
	}

	resp, body = c.post("/jobs/retry", form("queue", "emails", "status", "failed"))
	redirect("retry the failed emails", resp, body, "retried-many")
	if n := resp.Header.Get("Location"); !strings.Contains(n, "n=1") {
		t.Errorf("retrying the failed emails retried %s, want 1 (the crashed one)", n)
	}
	if st := s.status(t, s.crashed); st != runtime.StatusQueued {
		t.Errorf("crashed job is %s after the bulk retry, want queued", st)
	}
	if resp, body := c.post("/jobs/cancel", form()); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "no filter") {
		t.Errorf("a bulk cancel without a filter: %s %q", resp.Status, body)
	}
	resp, body = c.post("/jobs/cancel", form("group", "acct-1"))
	redirect("cancel group acct-1", resp, body, "cancelled-many")
	if st := s.status(t, s.behind); st != runtime.StatusCancelled {
		t.Errorf("job behind the blocker is %s, want cancelled", st)
	}

	resp, body = c.post("/queues/pause", form("queue", "emails"))
	redirect("pause emails", resp, body, "paused")
	paused, err := runtime.PausedQueues(ctx, s.pool)
	if err != nil || len(paused) != 1 || paused[0].Queue != "emails" {
		t.Fatalf("paused queues %v, %v", paused, err)
	}
	if r := row(c.get("/"), "emails"); r[1] != "paused" || r[len(r)-1] != "Resume" {
		t.Errorf("paused queue's row %q", r)
	}
	resp, body = c.post("/queues/resume", form("queue", "emails"))
	redirect("resume emails", resp, body, "resumed")
	if paused, err := runtime.PausedQueues(ctx, s.pool); err != nil || len(paused) != 0 {
		t.Errorf("paused queues after resume %v, %v", paused, err)
	}
	resp, body = c.post("/queues/resume", form("queue", "emails"))
	redirect("resume emails again", resp, body, "was-running")

	// The page an action returns to is one of the dashboard's.
	v := form()
	v.Set("back", "//evil.example/phish")
	resp, _ = c.post(fmt.Sprintf("/jobs/%d/retry", s.sent), v)
	if loc := resp.Header.Get("Location"); !strings.HasPrefix(loc, "/?done=") {
		t.Errorf("an action with back=//evil.example redirected to %q", loc)
	}
}

// A POST without the token of a page, with a wrong one, or from another
// site is refused and changes nothing.
func TestCSRFRefusesForgedPosts(t *testing.T) {
	t.Parallel()
	s := seed(t)
	c := newDashboard(t, s, dashboard.Options{})
	other := newDashboard(t, s, dashboard.Options{}) // another process: another key
	good := c.token("/")
	path := fmt.Sprintf("/jobs/%d/retry", s.bounced)
	for _, tc := range []struct {
		name   string
		form   url.Values
		header []string
		want   string
	}{
		{"no token", url.Values{}, nil, "carries no token"},
		{"a made-up token", url.Values{"csrf": {"AAAAAGsEuRyw1d25pH8W-LdTWvFjoCuemj8oT78IhO3ZhLCnWn7Msw"}}, nil, "not valid here"},
		{"another dashboard's token", url.Values{"csrf": {other.token("/")}}, nil, "not valid here"},
		{"from another site", url.Values{"csrf": {good}}, []string{"Sec-Fetch-Site", "cross-site"}, "came from another site"},
		{"from another origin", url.Values{"csrf": {good}}, []string{"Sec-Fetch-Site", "", "Origin", "https://evil.example"}, "came from another site"},
	} {
		resp, body := c.post(path, tc.form, tc.header...)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %s %q; want 403 saying %q", tc.name, resp.Status, body, tc.want)
		}
	}
	if st := s.status(t, s.bounced); st != runtime.StatusFailed {
		t.Fatalf("a refused POST changed the job: %s", st)
	}
	if resp, _ := c.post(path, url.Values{"csrf": {good}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the page's own token was refused: %s", resp.Status)
	}
	if resp, _ := c.getStatus(path); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET of an action: %s, want 405", resp.Status)
	}
}

// Read-only: no forms but the filters, and every POST is refused.
func TestReadOnly(t *testing.T) {
	t.Parallel()
	s := seed(t)
	c := newDashboard(t, s, dashboard.Options{ReadOnly: true})
	rw := newDashboard(t, s, dashboard.Options{})
	for _, path := range []string{"/", "/jobs?status=failed", fmt.Sprintf("/jobs/%d", s.bounced), "/groups"} {
		body := c.get(path)
		if strings.Contains(body, `method="post"`) || strings.Contains(body, "Retry") || strings.Contains(body, "Pause") {
			t.Errorf("read-only %s offers an action", path)
		}
		if !strings.Contains(body, "read-only") {
			t.Errorf("read-only %s does not say so", path)
		}
	}
	for _, path := range []string{fmt.Sprintf("/jobs/%d/retry", s.bounced), "/queues/pause", "/jobs/retry"} {
		resp, body := c.post(path, url.Values{"csrf": {rw.token("/")}, "queue": {"emails"}, "status": {"failed"}})
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("read-only POST %s: %s %q", path, resp.Status, body)
		}
	}
	if st := s.status(t, s.bounced); st != runtime.StatusFailed {
		t.Errorf("a read-only dashboard changed a job: %s", st)
	}
	if paused, err := runtime.PausedQueues(context.Background(), s.pool); err != nil || len(paused) != 0 {
		t.Errorf("a read-only dashboard paused %v (%v)", paused, err)
	}
}

// Basic authentication guards every path, the stylesheet included.
func TestBasicAuth(t *testing.T) {
	t.Parallel()
	s := seed(t)
	c := newDashboard(t, s, dashboard.Options{BasicAuth: &dashboard.BasicAuth{User: "ops", Password: "s3cret", Realm: "jobs"}})
	for _, creds := range [][2]string{{"", ""}, {"ops", "wrong"}, {"ops2", "s3cret"}, {"op", "s3cret"}} {
		c.user, c.pass = creds[0], creds[1]
		for _, path := range []string{"/", "/jobs", "/static/dashboard.css"} {
			resp, _ := c.getStatus(path)
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != `Basic realm="jobs", charset="UTF-8"` {
				t.Errorf("GET %s as %q/%q: %s, WWW-Authenticate %q", path, creds[0], creds[1], resp.Status, resp.Header.Get("WWW-Authenticate"))
			}
		}
		if resp, _ := c.post(fmt.Sprintf("/jobs/%d/retry", s.bounced), url.Values{}); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST as %q/%q: %s", creds[0], creds[1], resp.Status)
		}
	}
	c.user, c.pass = "ops", "s3cret"
	c.get("/")
	c.get("/static/dashboard.css")
	if resp, _ := c.post(fmt.Sprintf("/jobs/%d/retry", s.bounced), url.Values{"csrf": {c.token("/")}}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("an authenticated action: %s", resp.Status)
	}
}

// Mounted below a path, every link, form and redirect stays below it.
func TestBasePath(t *testing.T) {
	t.Parallel()
	s := seed(t)
	mux := http.NewServeMux()
	mux.Handle("/admin/pgtask/", dashboard.New(s.pool, dashboard.Options{BasePath: "/admin/pgtask/", Logger: quiet}))
	c := serve(t, mux)
	if resp, _ := c.getStatus("/admin/pgtask"); resp.StatusCode/100 != 3 || resp.Header.Get("Location") != "/admin/pgtask/" {
		t.Errorf("GET /admin/pgtask: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	body := c.get("/admin/pgtask/")
	for _, want := range []string{`href="/admin/pgtask/static/dashboard.css"`, `href="/admin/pgtask/jobs?queue=emails"`, `action="/admin/pgtask/queues/pause"`} {
		if !strings.Contains(body, want) {
			t.Errorf("page below /admin/pgtask lacks %s", want)
		}
	}
	c.get("/admin/pgtask/static/dashboard.css")
	c.get(fmt.Sprintf("/admin/pgtask/jobs/%d", s.crashed))
	tok := c.token("/admin/pgtask/groups")
	resp, _ := c.post(fmt.Sprintf("/admin/pgtask/jobs/%d/retry", s.blocker), url.Values{"csrf": {tok}, "back": {"/groups"}})
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/admin/pgtask/groups?") {
		t.Errorf("retry below /admin/pgtask: %s to %q", resp.Status, loc)
	}
	if resp, _ := c.getStatus("/jobs"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /jobs outside the base path: %s", resp.Status)
	}
}

func TestOptionsCheck(t *testing.T) {
	for _, o := range []dashboard.Options{
		{}, {BasePath: "/"}, {BasePath: "/pgtask"}, {BasePath: "/admin/pgtask/"},
		{BasicAuth: &dashboard.BasicAuth{User: "u", Password: "p"}},
	} {
		if err := o.Check(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	for _, o := range []dashboard.Options{
		{BasePath: "pgtask"}, {BasePath: "/a/../b"}, {BasePath: "/a//b"}, {BasePath: "/{x}"},
		{BasicAuth: &dashboard.BasicAuth{User: "u"}}, {BasicAuth: &dashboard.BasicAuth{Password: "p"}},
	} {
		if err := o.Check(); err == nil {
			t.Errorf("%+v passed the check", o)
		}
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "BasePath") {
			t.Errorf("New with a bad BasePath: %v, want a panic naming it", r)
		}
	}()
	dashboard.New(nil, dashboard.Options{BasePath: "x"})
}

// Only the dashboard's own sentences show as what an action did.
func TestFlashIsFixedText(t *testing.T) {
	t.Parallel()
	s := seed(t)
	c := newDashboard(t, s, dashboard.Options{})
	for _, q := range []string{"?done=<b>owned</b>", "?done=retried&n=abc", "?done=retried"} {
		if body := c.get("/" + q); strings.Contains(body, `class="flash"`) {
			t.Errorf("GET /%s shows a flash", q)
		}
	}
	if body := text(c.get("/?done=retried-many&n=12")); !strings.Contains(body, "Retried 12 jobs.") {
		t.Errorf("the flash of a bulk retry is missing:\n%s", body)
	}
}

// Cancelling a running job asks its worker to stop the attempt, and the
// job ends cancelled.
func TestCancelRunningJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtasktest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	id, err := runtime.Enqueue(ctx, pool, runtime.EnqueueRequest{Kind: "slow", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	w, err := runtime.NewWorker(ctx, pc, runtime.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	started := make(chan struct{})
	must(t, w.Register(runtime.Registration{Kind: "slow", Handler: func(ctx context.Context, _ *runtime.Job) error {
		close(started)
		<-ctx.Done()
		return context.Cause(ctx)
	}}))
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx) }()
	defer func() { stop(); <-ran }()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not start")
	}

	c := newDashboard(t, &seeded{pool: pool}, dashboard.Options{})
	page := fmt.Sprintf("/jobs/%d", id)
	resp, _ := c.post(page+"/cancel", url.Values{"csrf": {c.token(page)}, "back": {page}})
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "done=cancel-asked") {
		t.Fatalf("cancel a running job: %s to %q", resp.Status, loc)
	}
	if body := text(c.get(resp.Header.Get("Location"))); !strings.Contains(body, "its worker is asked to cancel the attempt") {
		t.Errorf("the page after the cancel does not say the worker was asked:\n%s", body)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		j, err := runtime.GetJob(ctx, pool, id)
		if err == nil && j.Status == runtime.StatusCancelled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the running job did not end cancelled: %+v, %v", j, err)
		}
	}
}
