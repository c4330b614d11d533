package dashboard_test

import (
	"context"
	"errors"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/dashboard"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// seeded is a database with jobs in every status, and the ids of some.
type seeded struct {
	pool *pgxpool.Pool
	// emails: sent succeeded (with a result) after a snooze, bounced failed for good,
	// crashed panicked on its only attempt, later is scheduled an hour on.
	sent, bounced, crashed, later runtime.JobID
	// reports: blocker failed and blocks group acct-1, behind waits behind
	// it; fresh heads group acct-2 and is runnable.
	blocker, behind, fresh runtime.JobID
}

func seed(t *testing.T) *seeded {
	t.Helper()
	ctx := context.Background()
	url := pgtasktest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := &seeded{pool: pool}
	enq := func(kind, payload string, o runtime.EnqueueOptions) runtime.JobID {
		t.Helper()
		id, err := runtime.Enqueue(ctx, pool, runtime.EnqueueRequest{Kind: kind, Payload: []byte(payload), EnqueueOptions: o})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	s.sent = enq("send_email", `{"to":"ada@example.com"}`, runtime.EnqueueOptions{Queue: "emails"})
	s.bounced = enq("send_email", `{"to":"nobody@example.com"}`, runtime.EnqueueOptions{Queue: "emails"})
	s.crashed = enq("send_email", `{"to":"crash@example.com"}`, runtime.EnqueueOptions{Queue: "emails", MaxAttempts: 1,
		Metadata: map[string]string{"tenant": "acme", "request_id": "r-42"}})
	s.blocker = enq("build_report", `{"account":1}`, runtime.EnqueueOptions{Queue: "reports", Group: "acct-1", FailBlocksGroup: true, MaxAttempts: 1})

	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	w, err := runtime.NewWorker(ctx, pc, runtime.Config{
		Queues: map[string]runtime.QueueConfig{"emails": {}, "reports": {}},
		Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	snoozed := false
	must(t, w.Register(runtime.Registration{Kind: "send_email", Handler: func(ctx context.Context, job *runtime.Job) error {
		switch job.ID {
		case s.sent:
			if !snoozed { // once: sent succeeds after a snooze
				snoozed = true
				return runtime.Snooze(0)
			}
		case s.bounced:
			if err := job.ReportProgressValue(ctx, 37.5, "waiting for the mail server", map[string]int{"tries": 3}); err != nil {
				return err
			}
			return runtime.NoRetry(errors.New("smtp: 550 mailbox unavailable"))
		case s.crashed:
			panic("template missing")
		}
		return job.SetResult(map[string]string{"message_id": "m-1"})
	}}))
	must(t, w.Register(runtime.Registration{Kind: "build_report", Handler: func(context.Context, *runtime.Job) error {
		return errors.New("report source offline")
	}}))
	if _, err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	s.later = enq("send_email", `{"to":"later@example.com"}`, runtime.EnqueueOptions{Queue: "emails", Delay: time.Hour})
	s.behind = enq("build_report", `{"account":1,"n":2}`, runtime.EnqueueOptions{Queue: "reports", Group: "acct-1"})
	s.fresh = enq("build_report", `{"account":2}`, runtime.EnqueueOptions{Queue: "reports", Group: "acct-2"})
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// status reads a job's status.
func (s *seeded) status(t *testing.T, id runtime.JobID) runtime.Status {
	t.Helper()
	j, err := runtime.GetJob(context.Background(), s.pool, id)
	if err != nil {
		t.Fatal(err)
	}
	return j.Status
}

// client talks to a dashboard served by httptest, without following
// redirects, so that tests see them.
type client struct {
	t    *testing.T
	srv  *httptest.Server
	user string
	pass string
}

func serve(t *testing.T, h http.Handler) *client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &client{t: t, srv: srv}
}

func (c *client) do(req *http.Request) (*http.Response, string) {
	c.t.Helper()
	if c.user != "" {
		req.SetBasicAuth(c.user, c.pass)
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp, string(body)
}

// get fetches path and fails the test unless it answers 200.
func (c *client) get(path string) string {
	c.t.Helper()
	resp, body := c.getStatus(path)
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("GET %s: %s\n%s", path, resp.Status, body)
	}
	return body
}

func (c *client) getStatus(path string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.srv.URL+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.do(req)
}

// post submits a form the way a browser on the dashboard's own page does.
func (c *client) post(path string, form url.Values, header ...string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", c.srv.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return c.do(req)
}

var tokenRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token is the form token on the page at path.
func (c *client) token(path string) string {
	c.t.Helper()
	m := tokenRE.FindStringSubmatch(c.get(path))
	if m == nil {
		c.t.Fatalf("no form token on %s", path)
	}
	return m[1]
}

var (
	rowRE  = regexp.MustCompile(`(?s)<tr[ >].*?</tr>`)
	cellRE = regexp.MustCompile(`(?s)<t[dh][ >].*?</t[dh]>`)
	tagRE  = regexp.MustCompile(`<[^>]*>`)
)

// text is what a person reads in a piece of HTML: tags dropped, entities
// decoded, white space folded.
func text(s string) string {
	return strings.Join(strings.Fields(html.UnescapeString(tagRE.ReplaceAllString(s, " "))), " ")
}

// rows are the cells of the table rows of body, as text.
func rows(body string) [][]string {
	var out [][]string
	for _, r := range rowRE.FindAllString(body, -1) {
		var cells []string
		for _, c := range cellRE.FindAllString(r, -1) {
			cells = append(cells, text(c))
		}
		out = append(out, cells)
	}
	return out
}

// row is the row of body whose first cell is first; nil if none.
func row(body, first string) []string {
	for _, r := range rows(body) {
		if len(r) > 0 && r[0] == first {
			return r
		}
	}
	return nil
}

// quiet is a logger for tests: the dashboard logs every action.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newDashboard serves a dashboard over s's database.
func newDashboard(t *testing.T, s *seeded, opts dashboard.Options) *client {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	return serve(t, dashboard.New(s.pool, opts))
}
