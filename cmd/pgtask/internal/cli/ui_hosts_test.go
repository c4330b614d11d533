package cli_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/cmd/pgtask/internal/cli"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// pgtask ui answers to its address and the hosts of -allow-host only: a
// name made to resolve to it (DNS rebinding) gets 421.
func TestUIAllowHost(t *testing.T) {
	url := pgtasktest.NewDatabase(t)
	t.Setenv("PGTASK_UI_USER", "")
	t.Setenv("PGTASK_UI_PASSWORD", "")
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var out, errOut syncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- cli.Run(ctx, []string{"ui", "-addr", "127.0.0.1:0", "-allow-host", "jobs.example.com,localhost:9000", "-database-url", url}, &out, &errOut)
	}()
	defer func() { stop(); <-exited }()
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if line, ok := strings.CutPrefix(out.String(), "pgtask ui: serving http://"); ok {
			addr = strings.TrimSuffix(line, "/\n")
		}
	}
	if addr == "" {
		t.Fatalf("no serving line: stdout %q, stderr %q", out.String(), errOut.String())
	}
	_, port, _ := net.SplitHostPort(addr)
	for host, want := range map[string]int{
		addr: http.StatusOK, "localhost:" + port: http.StatusOK, "jobs.example.com": http.StatusOK, "localhost:9000": http.StatusOK,
		"rebind.evil.example:" + port: http.StatusMisdirectedRequest, "localhost:9001": http.StatusMisdirectedRequest,
	} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET / with Host %q: %s, want %d", host, resp.Status, want)
		}
	}
	if code, _, errOut := run(t, "ui", "-allow-host", "http://jobs.example.com"); code != 2 || !strings.Contains(errOut, "AllowedHosts") {
		t.Errorf("pgtask ui -allow-host http://jobs.example.com: code %d, stderr %q", code, errOut)
	}
}
