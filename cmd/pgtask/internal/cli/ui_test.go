package cli_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgtask/pgtask/cmd/pgtask/internal/cli"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// syncBuffer is a buffer the command writes to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// pgtask ui serves the dashboard behind basic auth from the environment,
// and stops when its context ends.
func TestUIServesTheDashboard(t *testing.T) {
	url := pgtasktest.NewDatabase(t)
	t.Setenv("PGTASK_UI_USER", "ops")
	t.Setenv("PGTASK_UI_PASSWORD", "s3cret")
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var out, errOut syncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- cli.Run(ctx, []string{"ui", "-addr", "127.0.0.1:0", "-read-only", "-base-path", "/pgtask", "-database-url", url}, &out, &errOut)
	}()
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if line, ok := strings.CutPrefix(out.String(), "pgtask ui: serving "); ok {
			addr = strings.TrimSuffix(line, " (read-only)\n")
		}
	}
	if addr == "" || !strings.HasSuffix(addr, "/pgtask/") {
		t.Fatalf("no serving line: stdout %q, stderr %q", out.String(), errOut.String())
	}
	get := func(user, password string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, addr, nil)
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, _ := get("", ""); code != http.StatusUnauthorized {
		t.Errorf("without a password: %d, want 401", code)
	}
	if code, _ := get("ops", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("with a wrong password: %d, want 401", code)
	}
	if code, body := get("ops", "s3cret"); code != http.StatusOK || !strings.Contains(body, "<h1>Queues</h1>") || !strings.Contains(body, "read-only") {
		t.Errorf("with the password: %d\n%s", code, body)
	}
	stop()
	select {
	case code := <-exited:
		if code != 0 {
			t.Errorf("pgtask ui exited %d after its context ended; stderr %q", code, errOut.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("pgtask ui did not stop when its context ended")
	}
}

func TestUIUsage(t *testing.T) {
	code, _, errOut := run(t, "ui", "-h")
	for _, want := range []string{"usage: pgtask ui", "PGTASK_UI_USER and PGTASK_UI_PASSWORD", "-read-only", `-addr string`, `(default "127.0.0.1:8080")`, "HMAC token"} {
		if code != 0 || !strings.Contains(errOut, want) {
			t.Errorf("pgtask ui -h: code %d, lacks %q:\n%s", code, want, errOut)
		}
	}
	t.Setenv("DATABASE_URL", "")
	t.Setenv("PGTASK_UI_PASSWORD", "")
	for _, c := range []struct {
		env  string
		args []string
		code int
		want string
	}{
		{"ops", []string{"ui"}, 2, "set both PGTASK_UI_USER and PGTASK_UI_PASSWORD, or neither"},
		{"", []string{"ui", "-base-path", "pgtask"}, 2, "want a clean absolute path"},
		{"", []string{"ui"}, 1, "no database: DATABASE_URL is not set"},
		{"", []string{"ui", "extra"}, 2, `unexpected argument "extra"`},
	} {
		t.Setenv("PGTASK_UI_USER", c.env)
		if code, _, errOut := run(t, c.args...); code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("pgtask %v with PGTASK_UI_USER=%q: code %d, stderr %q; want %d and %q", c.args, c.env, code, errOut, c.code, c.want)
		}
	}
}
