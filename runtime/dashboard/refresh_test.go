package dashboard_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/runtime/dashboard"
)

// A page reloads itself with refresh=N, through a meta tag, and links to
// turning it on and off; a refresh that is not a sensible number of
// seconds is refused, and an action returns to the page still refreshing.
func TestAutoRefresh(t *testing.T) {
	t.Parallel()
	s := seed(t)
	c := newDashboard(t, s, dashboard.Options{})
	body := c.get("/")
	if strings.Contains(body, `http-equiv="refresh"`) || !strings.Contains(body, `<a class="refresh" href="/?refresh=10">reload it every 10 seconds</a>`) {
		t.Errorf("the queues page without refresh: no link to turn it on, or a reload:\n%s", body)
	}
	body = c.get("/?refresh=10")
	if !strings.Contains(body, `<meta http-equiv="refresh" content="10; url=/?refresh=10">`) || !strings.Contains(body, `<a class="refresh" href="/">stop</a>`) {
		t.Errorf("the queues page with refresh=10: no reload, or no link to stop it:\n%s", body)
	}
	body = c.get("/jobs?status=failed&refresh=30&done=retried&n=7")
	if !strings.Contains(body, `<meta http-equiv="refresh" content="30; url=/jobs?refresh=30&amp;status=failed">`) ||
		!strings.Contains(body, `href="/jobs?status=failed">stop</a>`) {
		t.Errorf("the jobs page with refresh=30 after an action: want a reload of the page without the flash:\n%s", body)
	}
	for _, bad := range []string{"0", "1", "abc", "99999", "-5", "10s"} {
		resp, body := c.getStatus("/?refresh=" + url.QueryEscape(bad))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "in seconds from 2 to 3600") {
			t.Errorf("refresh=%s: %s %q, want 400", bad, resp.Status, body)
		}
	}
	resp, _ := c.post("/queues/pause", url.Values{"csrf": {c.token("/")}, "queue": {"emails"}, "back": {"/?refresh=10"}})
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "refresh=10") {
		t.Errorf("an action from a refreshing page returns to %s %q", resp.Status, loc)
	}
}
