package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/cmd/pgtask/internal/cli"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// Every command that reads or changes the database takes -json, and flags
// go before or after the arguments alike.
func TestJSONAndFlagsAnywhere(t *testing.T) {
	t.Parallel()
	url := pgtasktest.NewEmptyDatabase(t)
	ctx := context.Background()
	code, out, errOut := run(t, "migrate", "-json", "-database-url", url)
	var report struct {
		Migrations []int `json:"migrations"`
		Functions  []struct {
			Name     string `json:"name"`
			Revision int    `json:"revision"`
		} `json:"functions"`
		Grants int `json:"grants"`
	}
	if err := json.Unmarshal([]byte(out), &report); code != 0 || err != nil || !slices.Contains(report.Migrations, 1) ||
		len(report.Functions) == 0 || report.Functions[0].Revision < 1 {
		t.Fatalf("migrate -json: code %d, stdout %q, stderr %q (%v)", code, out, errOut, err)
	}
	if code, out, errOut = run(t, "migrate", "-database-url", url, "-json"); code != 0 || strings.Join(strings.Fields(out), "") != `{"migrations":[],"functions":[],"grants":0}` {
		t.Fatalf("migrate -json again: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	id, err := runtime.Enqueue(ctx, pool, runtime.EnqueueRequest{Kind: "mail", Payload: []byte(`{}`),
		EnqueueOptions: runtime.EnqueueOptions{Queue: "emails"}})
	if err != nil {
		t.Fatal(err)
	}
	job := fmt.Sprint(id)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pause", "emails", "-json", "-database-url", url},
			`[{"queue":"emails","paused":true,"changed":true}]`},
		{[]string{"pause", "-json", "emails", "-database-url", url},
			`[{"queue":"emails","paused":true,"changed":false}]`},
		{[]string{"resume", "emails", "-database-url", url, "-json"},
			`[{"queue":"emails","paused":false,"changed":true}]`},
		{[]string{"jobs", "list", "-database-url", url, "-json", "-queue", "nosuchqueue"}, `[]`},
		{[]string{"cancel", job, "-json", "-database-url", url}, `{"cancelled":1}`},
		{[]string{"retry", job, "-database-url", url, "-json"}, `{"retried":1}`},
	} {
		code, out, errOut := run(t, c.args...)
		if code != 0 || strings.Join(strings.Fields(out), "") != c.want {
			t.Errorf("pgtask %v: code %d, stdout %q, stderr %q; want %s", c.args, code, out, errOut, c.want)
		}
	}
	code, out, errOut = run(t, "jobs", "show", job, "-json", "-database-url", url)
	var shown struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal([]byte(out), &shown); code != 0 || err != nil || shown.ID != int64(id) {
		t.Fatalf("jobs show ID -json: code %d, stdout %q, stderr %q (%v)", code, out, errOut, err)
	}
	// After --, what looks like a flag is an argument.
	if code, _, errOut := run(t, "cancel", "-database-url", url, "--", "-json"); code != 2 || !strings.Contains(errOut, `"-json" is not a job id`) {
		t.Errorf("cancel -- -json: code %d, stderr %q; want 2 and -json taken as a job id", code, errOut)
	}
}

// ui -json says where it serves as JSON, and stops when its context ends.
func TestUIJSON(t *testing.T) {
	t.Parallel()
	url := pgtasktest.NewDatabase(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var out, errOut syncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- cli.Run(ctx, []string{"ui", "-database-url", url, "-json", "-addr", "127.0.0.1:0"}, &out, &errOut)
	}()
	var served struct {
		Serving  string `json:"serving"`
		ReadOnly bool   `json:"read_only"`
	}
	for deadline := time.Now().Add(10 * time.Second); served.Serving == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if line := out.String(); strings.HasSuffix(line, "\n") {
			if err := json.Unmarshal([]byte(line), &served); err != nil {
				t.Fatalf("ui -json printed %q: %v", line, err)
			}
		}
	}
	if !strings.HasPrefix(served.Serving, "http://127.0.0.1:") || served.ReadOnly {
		t.Fatalf("ui -json: stdout %q, stderr %q", out.String(), errOut.String())
	}
	stop()
	if code := <-exited; code != 0 {
		t.Fatalf("ui -json exited %d; stderr %q", code, errOut.String())
	}
}

// Exit status: 0 done, 1 failed, 2 wrong usage (bad flags, arguments or
// values), for each command.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	url := pgtasktest.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	id, err := runtime.Enqueue(context.Background(), pool, runtime.EnqueueRequest{Kind: "mail", Payload: []byte(`{}`),
		EnqueueOptions: runtime.EnqueueOptions{Queue: "emails"}})
	if err != nil {
		t.Fatal(err)
	}
	job := fmt.Sprint(id)
	db := func(args ...string) []string { return withDB(url, args...) }
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"help"}, 0},
		{[]string{"stats", "-h"}, 0},
		{nil, 2},
		{[]string{"nope"}, 2},
		{db("migrate"), 0},
		{db("migrate", "-json"), 0},
		{db("migrate", "-nope"), 2},
		{db("stats"), 0},
		{db("stats", "-json"), 0},
		{db("stats", "extra"), 2},
		{db("jobs", "list"), 0},
		{db("jobs", "list", "-limit", "-1"), 2},
		{db("jobs", "list", "-status", "lost"), 2},
		{db("jobs", "list", "-created-before", "today"), 2},
		{db("jobs", "show", job), 0},
		{db("jobs", "show", "999999"), 1},
		{db("jobs", "show"), 2},
		{db("jobs", "frob"), 2},
		{db("cancel", "-status", "lost", "-all"), 2},
		{db("purge", "-status", "lost"), 2},
		{db("retry", "0"), 2},
		{db("retry", "999999"), 1},
		{db("pause", strings.Repeat("q", 200)), 2},
		{db("pause", "-create", "bad\x00name"), 2},
		{db("pause", "emails"), 0},
		{db("pause", "emails"), 0},
		{db("resume", "emails"), 0},
		{db("resume", "emails"), 0},
		{db("cancel", job), 0},
		{db("cancel", job), 1},
		{db("retry", job), 0},
		{db("limits"), 0},
		{db("limits", "-json", "-queue", "emails"), 0},
		{db("limits", "-queue", ""), 0},
		{db("ui", "-base-path", "no-slash"), 2},
		{[]string{"gen", "a", "b"}, 2},
	} {
		if code, out, errOut := run(t, c.args...); code != c.code {
			t.Errorf("pgtask %q: code %d, want %d; stdout %q, stderr %q", c.args, code, c.code, out, errOut)
		}
	}
}
