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

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/dashboard"
)

// limited adds to s's database, in queue "imports" (which no worker
// serves), four jobs of key acct-9 limited to 1: the first admitted, the
// others waiting for its slot; and one under the queue's own limit of 2.
func limited(t *testing.T, s *seeded) []runtime.JobID {
	t.Helper()
	var reqs []runtime.EnqueueRequest
	for range 4 {
		reqs = append(reqs, runtime.EnqueueRequest{Kind: "import_row", Payload: []byte(`{}`),
			EnqueueOptions: runtime.EnqueueOptions{Queue: "imports", Limit: 1, LimitKey: "acct-9"}})
	}
	reqs = append(reqs, runtime.EnqueueRequest{Kind: "import_file", Payload: []byte(`{}`),
		EnqueueOptions: runtime.EnqueueOptions{Queue: "imports", Limit: 2}})
	ids, err := runtime.EnqueueMany(context.Background(), s.pool, reqs)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// The limits page lists each key with its limits and jobs, and the
// operators' limits; the queues page counts the jobs waiting on a limit
// apart from the runnable ones; a job's page says where it stands with its
// limit.
func TestLimitsPages(t *testing.T) {
	t.Parallel()
	s := seed(t)
	ids := limited(t, s)
	c := newDashboard(t, s, dashboard.Options{})

	body := c.get("/limits")
	if !strings.Contains(body, `<a href="/limits" aria-current="page">Limits</a>`) {
		t.Errorf("the limits page is not the current one in the navigation")
	}
	head := []string{"Queue", "Key", "Limit", "Declared", "Overridden", "Running", "Waiting", "Free"}
	if got := rows(body)[0]; !slices.Equal(got, head) {
		t.Errorf("header %q, want %q", got, head)
	}
	keys := rows(body)[1:3]
	want := [][]string{{"imports", "(queue)", "2", "2", "no", "0", "0", "1"}, {"imports", "acct-9", "1", "1", "no", "0", "3", "0"}}
	if !slices.EqualFunc(keys, want, slices.Equal) {
		t.Errorf("limit keys %q, want %q", keys, want)
	}
	if !strings.Contains(body, `href="/jobs?queue=imports&amp;status=queued"`) || !strings.Contains(text(body), "Operators' limits None: every key runs under the limit its tasks declare.") {
		t.Errorf("limits page:\n%s", text(body))
	}

	imports := row(c.get("/"), "imports")
	if want := []string{"imports", "running", "0", "2", "0", "3", "0"}; len(imports) < len(want) || !slices.Equal(imports[:len(want)], want) {
		t.Errorf("imports on the queues page %q, want it to start %q: two runnable, three on a limit", imports, want)
	}

	for id, want := range map[runtime.JobID]string{
		ids[0]: "Limit key acct-9, 1 at once: admitted it holds a slot",
		ids[3]: "Limit key acct-9, 1 at once: waiting for a free slot",
		ids[4]: "Limit the queue's own, 2 at once: admitted it holds a slot",
	} {
		if page := text(c.get(fmt.Sprintf("/jobs/%d", id))); !strings.Contains(page, want) {
			t.Errorf("job %d's page lacks %q:\n%s", id, want, page)
		}
	}
	if page := text(c.get(fmt.Sprintf("/jobs/%d", s.fresh))); strings.Contains(page, "at once") {
		t.Errorf("the page of a job without a limit names one:\n%s", page)
	}
}

// The forms set and clear operators' limits, as POSTs guarded like every
// action, and return to the limits page saying what they did.
func TestLimitActions(t *testing.T) {
	t.Parallel()
	s := seed(t)
	limited(t, s)
	c := newDashboard(t, s, dashboard.Options{})
	ctx := context.Background()
	back := "/limits?queue=imports"
	tok := c.token(back)
	form := func(kv ...string) url.Values {
		v := url.Values{"csrf": {tok}, "back": {back}}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	limitOf := func(key string) runtime.LimitInfo {
		t.Helper()
		infos, err := runtime.Limits(ctx, s.pool, "imports", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range infos {
			if l.Key == key {
				return l
			}
		}
		t.Fatalf("no key %q: %+v", key, infos)
		return runtime.LimitInfo{}
	}
	act := func(path string, f url.Values, done string, n int) {
		t.Helper()
		resp, body := c.post(path, f)
		loc, _ := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusSeeOther || loc.Path != "/limits" || loc.Query().Get("queue") != "imports" ||
			loc.Query().Get("done") != done || loc.Query().Get("n") != fmt.Sprint(n) {
			t.Fatalf("POST %s %v: %s to %q %q; want 303 to /limits?queue=imports with done=%s and n=%d", path, f, resp.Status, loc, body, done, n)
		}
	}

	act("/limits/set", form("queue", "imports", "key", "acct-9", "limit", "3"), "limit-set", 1)
	if l := limitOf("acct-9"); l.Limit != 3 || !l.Overridden || l.Free != 2 {
		t.Errorf("acct-9 after the form set 3: %+v", l)
	}
	act("/limits/set", form("queue", "imports", "every_key", "1", "limit", "5"), "limit-set", 0)
	act("/limits/set", form("queue", "imports", "limit", "4"), "limit-set", 1)
	if l := limitOf(""); l.Limit != 4 || !l.Overridden {
		t.Errorf("the queue's own limit after the form set 4: %+v", l)
	}
	body := c.get("/limits?queue=imports&done=limit-set&n=1")
	if !strings.Contains(text(body), "The limit is set, for every worker: 1 limit keys changed now.") {
		t.Errorf("the page after a set does not say so:\n%s", text(body))
	}
	overrides := rows(body)[4:]
	want := [][]string{{"imports", "(every key)", "5", "?", "Clear"}, {"imports", "(queue)", "4", "?", "Clear"}, {"imports", "acct-9", "3", "?", "Clear"}}
	for _, o := range overrides {
		if len(o) == 5 {
			o[3] = "?" // when it was set
		}
	}
	if !slices.EqualFunc(overrides, want, slices.Equal) {
		t.Errorf("operators' limits %q, want %q", overrides, want)
	}
	if !strings.Contains(body, `<input type="hidden" name="every_key" value="1">`) {
		t.Errorf("the every-key limit's Clear form does not say every key")
	}

	// Cleared: acct-9 falls back on every key's 5, then on its declared 1.
	act("/limits/clear", form("queue", "imports", "key", "acct-9"), "limit-cleared", 1)
	if l := limitOf("acct-9"); l.Limit != 5 || !l.Overridden {
		t.Errorf("acct-9 under every key's limit: %+v", l)
	}
	act("/limits/clear", form("queue", "imports", "every_key", "1"), "limit-cleared", 1)
	act("/limits/clear", form("queue", "imports", "limit", ""), "limit-cleared", 1)
	if l := limitOf("acct-9"); l.Limit != 1 || l.Overridden {
		t.Errorf("acct-9 with no operator's limit: %+v", l)
	}
	if o, err := runtime.LimitOverrides(ctx, s.pool, ""); err != nil || len(o) != 0 {
		t.Errorf("operators' limits left: %+v (%v)", o, err)
	}

	// Bad forms are refused with what is wrong, and change nothing.
	for _, tc := range []struct {
		form url.Values
		want string
	}{
		{form("key", "acct-9", "limit", "3"), "the form names no queue"},
		{form("queue", "imports", "key", "acct-9", "every_key", "1", "limit", "3"), "give a key or every key, not both"},
		{form("queue", "imports", "key", "acct-9", "limit", "0"), `limit "0": want a whole number of jobs from 1 to 2147483647`},
		{form("queue", "imports", "key", "acct-9", "limit", "-2"), `limit "-2"`},
		{form("queue", "imports", "key", "acct-9", "limit", "two"), `limit "two"`},
		{form("queue", "imports", "key", "acct-9"), `limit ""`},
		{form("queue", "imports", "key", "acct-9", "limit", "2147483648"), `limit "2147483648"`},
		{form("queue", strings.Repeat("q", 200), "limit", "3"), "more than the 128 allowed"},
		{form("queue", "imports", "key", strings.Repeat("k", 2000), "limit", "3"), "more than the 1024 allowed"},
	} {
		resp, body := c.post("/limits/set", tc.form)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("POST /limits/set %v: %s %q; want 400 saying %q", tc.form, resp.Status, body, tc.want)
		}
	}
	if o, err := runtime.LimitOverrides(ctx, s.pool, ""); err != nil || len(o) != 0 {
		t.Errorf("a refused form left operators' limits: %+v (%v)", o, err)
	}

	// Guarded like every action: no token, another site, read-only.
	for _, tc := range []struct {
		form   url.Values
		header []string
		want   string
	}{
		{url.Values{"queue": {"imports"}, "limit": {"9"}}, nil, "carries no token"},
		{form("queue", "imports", "limit", "9"), []string{"Sec-Fetch-Site", "cross-site"}, "came from another site"},
		{form("queue", "imports", "limit", "9"), []string{"Sec-Fetch-Site", "", "Origin", "https://evil.example"}, "came from another site"},
	} {
		for _, path := range []string{"/limits/set", "/limits/clear"} {
			resp, body := c.post(path, tc.form, tc.header...)
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, tc.want) {
				t.Errorf("POST %s %v %v: %s %q; want 403 saying %q", path, tc.form, tc.header, resp.Status, body, tc.want)
			}
		}
	}
	ro := newDashboard(t, s, dashboard.Options{ReadOnly: true})
	if resp, body := ro.post("/limits/set", form("queue", "imports", "limit", "9")); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Errorf("a read-only dashboard's POST /limits/set: %s %q", resp.Status, body)
	}
	if body := ro.get("/limits"); strings.Contains(body, `method="post"`) || !strings.Contains(body, "read-only") {
		t.Errorf("the read-only limits page offers a form, or does not say it is read-only")
	}
	if l := limitOf(""); l.Limit != 2 || l.Overridden {
		t.Errorf("a refused POST changed the queue's own limit: %+v", l)
	}
	if resp, _ := c.getStatus("/limits/set"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET of an action: %s, want 405", resp.Status)
	}
}

// The limits page lists each rate key with its rate, tokens and waiting
// jobs; the queues page counts the jobs waiting on a rate apart.
func TestRatesOnTheLimitsPage(t *testing.T) {
	t.Parallel()
	s := seed(t)
	var reqs []runtime.EnqueueRequest
	for range 3 {
		r := runtime.EnqueueRequest{Kind: "call_partner", Payload: []byte(`{}`)}
		r.Apply(runtime.WithQueue("calls"), runtime.WithRate("acme", 2, time.Minute), runtime.WithRateBurst(1))
		reqs = append(reqs, r)
	}
	if _, err := runtime.EnqueueMany(context.Background(), s.pool, reqs); err != nil {
		t.Fatal(err)
	}
	c := newDashboard(t, s, dashboard.Options{})
	body := c.get("/limits")
	r := row(body, "calls")
	if len(r) != 9 || r[1] != "acme" || r[2] != "2/1m" || r[3] != "1" || r[4] != "no" || r[5] != "1.0" || r[6] != "3" || r[7] == "–" {
		t.Errorf("rate key row %q:\n%s", r, text(body))
	}
	// queue, state, scheduled, runnable, in groups, on a limit, on a rate
	if q := row(c.get("/"), "calls"); len(q) < 7 || q[3] != "0" || q[6] != "3" {
		t.Errorf("calls row on the queues page %q: want 3 on a rate, none runnable", q)
	}
}

// The rate form sets and clears an operator's rate, guarded like every
// action; bad rates are refused with what is wrong, and change nothing.
func TestRateActions(t *testing.T) {
	t.Parallel()
	s := seed(t)
	ctx := context.Background()
	r := runtime.EnqueueRequest{Kind: "call_partner", Payload: []byte(`{}`)}
	r.Apply(runtime.WithQueue("calls"), runtime.WithRate("acme", 2, time.Minute), runtime.WithRateBurst(1))
	if _, err := runtime.EnqueueMany(ctx, s.pool, []runtime.EnqueueRequest{r}); err != nil {
		t.Fatal(err)
	}
	c := newDashboard(t, s, dashboard.Options{})
	back := "/limits?queue=calls"
	tok := c.token(back)
	form := func(kv ...string) url.Values {
		v := url.Values{"csrf": {tok}, "back": {back}}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	rateOf := func() runtime.RateInfo {
		t.Helper()
		infos, err := runtime.Rates(ctx, s.pool, "calls", 0)
		if err != nil || len(infos) != 1 {
			t.Fatalf("rates of calls: %+v (%v)", infos, err)
		}
		return infos[0]
	}
	act := func(path string, f url.Values, done string) {
		t.Helper()
		resp, body := c.post(path, f)
		loc, _ := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusSeeOther || loc.Path != "/limits" || loc.Query().Get("done") != done || loc.Query().Get("n") != "1" {
			t.Fatalf("POST %s %v: %s to %q %q; want 303 to /limits with done=%s and n=1", path, f, resp.Status, loc, body, done)
		}
	}

	act("/limits/rate/set", form("queue", "calls", "key", "acme", "rate", "30/1s", "burst", "5"), "rate-set")
	if got := rateOf(); got.Rate != 30 || got.Per != time.Second || got.Burst != 5 || !got.Overridden {
		t.Errorf("acme after the form set 30/1s burst 5: %+v", got)
	}
	body := c.get("/limits?queue=calls&done=rate-set&n=1")
	if !strings.Contains(text(body), "The rate is set, for every worker: 1 rate keys changed now.") {
		t.Errorf("the page after a set does not say so:\n%s", text(body))
	}
	if !strings.Contains(body, `action="/limits/rate/clear"`) || !strings.Contains(body, `name="key" value="acme"`) {
		t.Errorf("the overridden rate has no Clear form:\n%s", body)
	}
	act("/limits/rate/clear", form("queue", "calls", "key", "acme"), "rate-cleared")
	if got := rateOf(); got.Rate != 2 || got.Per != time.Minute || got.Burst != 1 || got.Overridden {
		t.Errorf("acme after its rate was cleared: %+v, want its declared 2/1m burst 1", got)
	}

	for _, tc := range []struct {
		form url.Values
		want string
	}{
		{form("key", "acme", "rate", "3/1s"), "the form names no queue"},
		{form("queue", "calls", "key", "acme", "rate", "3"), `rate "3": want N/PERIOD`},
		{form("queue", "calls", "key", "acme", "rate", "0/1s"), `rate "0/1s"`},
		{form("queue", "calls", "key", "acme", "rate", "3/1us"), `rate "3/1us"`},
		{form("queue", "calls", "key", "acme", "rate", "3/soon"), `rate "3/soon"`},
		{form("queue", "calls", "key", "acme", "rate", "3/1s", "burst", "0"), `burst "0"`},
		{form("queue", "calls", "key", "acme", "rate", "3/1s", "burst", "x"), `burst "x"`},
		{form("queue", strings.Repeat("q", 200), "rate", "3/1s"), "more than the 128 allowed"},
		{form("queue", "calls", "key", strings.Repeat("k", 2000), "rate", "3/1s"), "more than the 1024 allowed"},
	} {
		resp, body := c.post("/limits/rate/set", tc.form)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("POST /limits/rate/set %v: %s %q; want 400 saying %q", tc.form, resp.Status, body, tc.want)
		}
	}
	for _, path := range []string{"/limits/rate/set", "/limits/rate/clear"} {
		resp, body := c.post(path, url.Values{"queue": {"calls"}, "key": {"acme"}, "rate": {"9/1s"}})
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "carries no token") {
			t.Errorf("POST %s without a token: %s %q; want 403", path, resp.Status, body)
		}
	}
	ro := newDashboard(t, s, dashboard.Options{ReadOnly: true})
	if resp, body := ro.post("/limits/rate/set", form("queue", "calls", "key", "acme", "rate", "9/1s")); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Errorf("a read-only dashboard's POST /limits/rate/set: %s %q", resp.Status, body)
	}
	if got := rateOf(); got.Rate != 2 || got.Overridden {
		t.Errorf("a refused POST changed the rate: %+v", got)
	}
}
