package dashboard_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/dashboard"
)

// An action returns only to a page of the dashboard: a back field that
// decodes to another site's URL, or one a browser reads as such, falls back
// to the queues page.
func TestActionsRedirectOnlyToTheDashboard(t *testing.T) {
	t.Parallel()
	s := seed(t)
	for _, base := range []string{"", "/admin/pgtask"} {
		mux := http.NewServeMux()
		mux.Handle(base+"/", dashboard.New(s.pool, dashboard.Options{BasePath: base, Logger: quiet}))
		c := serve(t, mux)
		tok := c.token(base + "/")
		for _, back := range []string{
			"/%2fevil.example", "/%2Fevil.example/x", "/%5Cevil.example", "/%5cevil.example", "/\\evil.example",
			"//evil.example", "/%2F%2Fevil.example", "https://evil.example/", "/jobs/%2e%2e/%2fevil.example",
			"/%09/evil.example", "/\t/evil.example", "/jobs\\..\\\\evil.example", "/nowhere", "jobs", "/jobs/%2fx",
			"/jobs/1/../../%2fevil.example", "/jobs?x=1#//evil.example",
		} {
			resp, body := c.post(base+"/queues/resume", url.Values{"csrf": {tok}, "queue": {"emails"}, "back": {back}})
			loc := resp.Header.Get("Location")
			if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, base+"/?done=") {
				t.Errorf("base %q, back=%q: %s to %q %q; want 303 to %s/?done=…", base, back, resp.Status, loc, trimBody(body), base)
			}
		}
		for back, want := range map[string]string{
			"/":                               base + "/?done=",
			"/jobs?status=failed":             base + "/jobs?done=",
			fmt.Sprintf("/jobs/%d", s.sent):   fmt.Sprintf("%s/jobs/%d?done=", base, s.sent),
			"/groups?queue=reports&show=all":  base + "/groups?done=",
			"/jobs?queue=a%2Fb&status=failed": base + "/jobs?done=",
		} {
			resp, _ := c.post(base+"/queues/resume", url.Values{"csrf": {tok}, "queue": {"emails"}, "back": {back}})
			loc := resp.Header.Get("Location")
			if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, want) {
				t.Errorf("base %q, back=%q: %s to %q; want it to start %q", base, back, resp.Status, loc, want)
			}
		}
	}
}

// Text that is not UTF-8, or holds a NUL, is refused with 400 and a
// sentence that says which field, never the database's error, and changes
// nothing.
func TestRefusesTextThatIsNotUTF8(t *testing.T) {
	t.Parallel()
	s := seed(t)
	c := newDashboard(t, s, dashboard.Options{})
	tok := c.token("/")
	for _, path := range []string{
		"/jobs?queue=%00", "/jobs?kind=%ff", "/jobs?group=a%00b", "/jobs?status=failed&queue=%c3%28",
		"/jobs?status=scheduled&group=%fe", "/groups?queue=%00", "/groups?show=all&after_group=%ff",
		"/limits?queue=%ff", "/limits?after_key=a%00b",
	} {
		resp, body := c.getStatus(path)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(text(body), "not valid UTF-8 text") ||
			strings.Contains(body, "SQLSTATE") || strings.Contains(body, "byte sequence") {
			t.Errorf("GET %s: %s %q; want 400 saying the text is not valid", path, resp.Status, trimBody(text(body)))
		}
	}
	for _, action := range []struct {
		path string
		form url.Values
	}{
		{"/jobs/cancel", url.Values{"queue": {"reports\x00"}}},
		{"/jobs/retry", url.Values{"group": {"\xff"}, "status": {"failed"}}},
		{"/queues/pause", url.Values{"queue": {"emails\x00"}}},
		{"/queues/pause", url.Values{"queue": {"\xc3\x28"}}},
		{"/limits/set", url.Values{"queue": {"imports"}, "key": {"a\x00b"}, "limit": {"3"}}},
		{"/limits/clear", url.Values{"queue": {"\xff"}}},
	} {
		action.form.Set("csrf", tok)
		resp, body := c.post(action.path, action.form)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "not valid UTF-8 text") ||
			strings.Contains(body, "SQLSTATE") || strings.Contains(body, "byte sequence") {
			t.Errorf("POST %s %q: %s %q; want 400 saying the text is not valid", action.path, action.form.Encode(), resp.Status, trimBody(body))
		}
	}
	if st := s.status(t, s.fresh); st != runtime.StatusQueued {
		t.Errorf("a refused bulk cancel changed a job: %s", st)
	}
	if st := s.status(t, s.bounced); st != runtime.StatusFailed {
		t.Errorf("a refused bulk retry changed a job: %s", st)
	}
	// The page still works, and a filter in other scripts is fine.
	if body := text(c.get("/jobs?queue=" + url.QueryEscape("émails-日本"))); !strings.Contains(body, "No job matches.") {
		t.Errorf("a filter in UTF-8: %s", trimBody(body))
	}
}
