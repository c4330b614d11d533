package dashboard_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

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
