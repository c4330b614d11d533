package dashboard_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/dashboard"
)

// hostGet is a GET of path whose Host header is host, as a browser sends
// it for a page of that origin.
func (c *client) hostGet(host, path string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.srv.URL+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Host = host
	return c.do(req)
}

// hostPost is a form POST to path with Host host, from a page of that
// origin (what a browser sends after a DNS rebinding).
func (c *client) hostPost(host, path string, form url.Values) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://"+host)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	return c.do(req)
}

// A page served on loopback and reached under another name (a DNS
// rebinding: the attacker's name now resolves to 127.0.0.1) is refused, for
// reading and for acting, before anything else runs; the loopback
// spellings of the address it serves on, and the hosts configured, work.
func TestRefusesForeignHosts(t *testing.T) {
	t.Parallel()
	s := seed(t)
	c := newDashboard(t, s, dashboard.Options{})
	_, port, err := net.SplitHostPort(c.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tok := c.token("/")
	for _, host := range []string{
		"rebind.evil.example:" + port, "rebind.evil.example", "localhost.evil.example:" + port,
		"127.0.0.1.evil.example:" + port, "localhost:1" + port, "10.0.0.1:" + port,
	} {
		for _, path := range []string{"/", "/jobs?status=failed", fmt.Sprintf("/jobs/%d", s.sent), "/groups", "/limits", "/batches", "/workflows", "/static/dashboard.css"} {
			resp, body := c.hostGet(host, path)
			if resp.StatusCode != http.StatusMisdirectedRequest || strings.Contains(body, "ada@example.com") || strings.Contains(body, `name="csrf"`) {
				t.Errorf("GET %s with Host %q: %s %q; want 421", path, host, resp.Status, trimBody(body))
			}
		}
		for _, action := range []struct {
			path string
			form url.Values
		}{
			{"/queues/pause", url.Values{"queue": {"emails"}}},
			{"/jobs/cancel", url.Values{"queue": {"reports"}}},
			{fmt.Sprintf("/jobs/%d/retry", s.bounced), url.Values{}},
			{"/limits/set", url.Values{"queue": {"emails"}, "limit": {"1"}}},
		} {
			action.form.Set("csrf", tok)
			resp, body := c.hostPost(host, action.path, action.form)
			if resp.StatusCode != http.StatusMisdirectedRequest {
				t.Errorf("POST %s with Host %q: %s %q; want 421", action.path, host, resp.Status, trimBody(body))
			}
		}
	}
	if st := s.status(t, s.bounced); st != runtime.StatusFailed {
		t.Errorf("a request to a foreign host retried a job: %s", st)
	}
	if st := s.status(t, s.fresh); st != runtime.StatusQueued {
		t.Errorf("a request to a foreign host cancelled a job: %s", st)
	}
	if o, err := runtime.LimitOverrides(context.Background(), s.pool, ""); err != nil || len(o) != 0 {
		t.Errorf("a request to a foreign host set a limit: %+v (%v)", o, err)
	}
	if resp, body := c.hostGet("evil.example", "/"); !strings.Contains(body, `"evil.example"`) || !strings.Contains(body, "AllowedHosts") {
		t.Errorf("the refusal does not say which host, nor how to allow it: %s %q", resp.Status, body)
	}

	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LocalHost:" + port, "[::1]:" + port, "127.0.0.2:" + port} {
		if resp, body := c.hostGet(host, "/"); resp.StatusCode != http.StatusOK {
			t.Errorf("GET / with Host %q: %s %q", host, resp.Status, trimBody(body))
		}
		resp, body := c.hostPost(host, "/queues/pause", url.Values{"csrf": {tok}, "queue": {"emails"}})
		if resp.StatusCode != http.StatusSeeOther {
			t.Errorf("POST /queues/pause with Host %q: %s %q", host, resp.Status, trimBody(body))
		}
	}
}

// AllowedHosts adds names, on any port or on one, or any name at all.
func TestAllowedHosts(t *testing.T) {
	t.Parallel()
	s := seed(t)
	allowed := newDashboard(t, s, dashboard.Options{AllowedHosts: []string{"jobs.example.com", "ops.example.com:8443"}})
	for host, want := range map[string]int{
		"jobs.example.com": http.StatusOK, "jobs.example.com:9000": http.StatusOK, "JOBS.example.com": http.StatusOK,
		"ops.example.com:8443": http.StatusOK, "ops.example.com": http.StatusMisdirectedRequest,
		"ops.example.com:8444": http.StatusMisdirectedRequest, "evil.example": http.StatusMisdirectedRequest,
	} {
		if resp, body := allowed.hostGet(host, "/"); resp.StatusCode != want {
			t.Errorf("with AllowedHosts, GET / with Host %q: %s %q; want %d", host, resp.Status, trimBody(body), want)
		}
	}
	allowed.get("/") // the address it serves on still works
	anyHost := newDashboard(t, s, dashboard.Options{AllowedHosts: []string{"*"}})
	if resp, body := anyHost.hostGet("whatever.example", "/"); resp.StatusCode != http.StatusOK {
		t.Errorf(`with AllowedHosts "*", GET / with Host whatever.example: %s %q`, resp.Status, trimBody(body))
	}
	for _, bad := range []string{"", "http://jobs.example.com", "jobs.example.com/x", "jobs.example.com:x", "jobs.example.com:0", "::1", "*.example.com", "a b"} {
		if err := (dashboard.Options{AllowedHosts: []string{bad}}).Check(); err == nil {
			t.Errorf("AllowedHosts %q passed the check", bad)
		}
	}
	for _, good := range []string{"jobs.example.com", "jobs.example.com:8443", "[::1]:8080", "[::1]", "10.0.0.5", "*"} {
		if err := (dashboard.Options{AllowedHosts: []string{good}}).Check(); err != nil {
			t.Errorf("AllowedHosts %q: %v", good, err)
		}
	}
}

func trimBody(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
