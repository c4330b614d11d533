package cli_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/cmd/pgtask/internal/cli"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestMigrateAppliesThenReportsCurrent(t *testing.T) {
	t.Parallel()
	url := pgtasktest.NewEmptyDatabase(t)
	code, out, errOut := run(t, "migrate", "-database-url", url)
	if code != 0 || !strings.Contains(out, "applied migration 0001") || !strings.Contains(out, "applied functions/work.sql (revision ") {
		t.Fatalf("first migrate: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = run(t, "migrate", "-database-url", url)
	if code != 0 || out != "pgtask schema is up to date\n" {
		t.Fatalf("second migrate: code %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// pause and resume change the database and say what they did.
func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	url := pgtasktest.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := runtime.Enqueue(context.Background(), pool, runtime.EnqueueRequest{Kind: "mail", Payload: []byte(`{}`),
		EnqueueOptions: runtime.EnqueueOptions{Queue: "emails"}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		// reports has no jobs yet.
		{[]string{"pause", "-database-url", url, "-create", "emails", "reports"}, "paused queue emails\npaused queue reports\n"},
		{[]string{"pause", "-database-url", url, "emails"}, "queue emails was paused already\n"},
		{[]string{"resume", "-database-url", url, "emails"}, "resumed queue emails\n"},
		{[]string{"resume", "-database-url", url, "emails"}, "queue emails was not paused\n"},
	} {
		if code, out, errOut := run(t, c.args...); code != 0 || out != c.want {
			t.Errorf("pgtask %v: code %d, stdout %q, stderr %q; want %q", c.args[:1], code, out, errOut, c.want)
		}
	}
	paused, err := runtime.PausedQueues(context.Background(), pool)
	if err != nil || len(paused) != 1 || paused[0].Queue != "reports" {
		t.Fatalf("paused queues %v, %v; want reports", paused, err)
	}
	if code, _, errOut := run(t, "pause", "-database-url", url, strings.Repeat("q", 200)); code != 2 || !strings.Contains(errOut, "more than the 128 allowed") {
		t.Errorf("pausing a queue name too long: code %d, stderr %q", code, errOut)
	}
}

func TestCommandErrors(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: pgtask"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"migrate"}, 1, "no database: DATABASE_URL is not set"},
		{[]string{"migrate", "-nope"}, 2, "flag provided but not defined: -nope"},
		{[]string{"migrate", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"migrate", "-database-url", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2"}, 1, "pgtask migrate: connect:"},
		{[]string{"migrate", "-print"}, 2, "-print need -roles"},
		{[]string{"migrate", "-roles", "boss=x"}, 2, `"boss": the parts are producer, worker and admin`},
		{[]string{"migrate", "-roles", "worker=a,worker=b"}, 2, "the worker is named twice"},
		{[]string{"migrate", "-roles", "worker"}, 2, `"worker" is not PART=ROLE`},
		{[]string{"pause"}, 2, "name at least one queue"},
		{[]string{"resume", "q"}, 1, "no database: DATABASE_URL is not set"},
	}
	for _, c := range cases {
		code, _, errOut := run(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("pgtask %v: code %d, stderr %q; want %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
	if code, out, _ := run(t, "help"); code != 0 || !strings.Contains(out, "migrate") {
		t.Errorf("help: code %d, stdout %q", code, out)
	}
}

// migrate -roles grants roles after migrating, from flags or from the
// environment, and -print prints the SQL instead. Not parallel: it sets
// environment variables.
func TestMigrateGrantsRoles(t *testing.T) {
	url := pgtasktest.NewEmptyDatabase(t)
	ctx := context.Background()
	var suffix [5]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		t.Fatal(err)
	}
	producer, worker := "pgtask_c"+hex.EncodeToString(suffix[:])+"_producer", "pgtask_c"+hex.EncodeToString(suffix[:])+"_worker"
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	t.Cleanup(func() {
		if _, err := runtime.DropRoles(context.Background(), pool, producer, worker); err != nil {
			t.Errorf("drop the test's roles: %v", err)
		}
	})

	t.Setenv("PGTASK_ROLES", "producer="+producer+", worker="+worker)
	t.Setenv("PGTASK_CREATE_ROLES", "true")
	code, out, errOut := run(t, "migrate", "-database-url", url, "-own-jobs-only")
	want := "granted pgtask's privileges to producer " + producer + ", worker " + worker + ", the producer reading its own jobs only ("
	if code != 0 || !strings.Contains(out, "applied migration 0001") || !strings.Contains(out, want) {
		t.Fatalf("migrate with roles: code %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	t.Setenv("PGTASK_CREATE_ROLES", "")
	code, out, errOut = run(t, "migrate", "-database-url", url, "-own-jobs-only", "-print")
	if code != 0 || !strings.HasPrefix(out, "BEGIN;\nREVOKE ALL ON SCHEMA pgtask FROM PUBLIC, "+producer+", "+worker+";\n") ||
		!strings.Contains(out, "\nGRANT SELECT ON TABLE pgtask.jobs TO "+producer+";\n") || !strings.HasSuffix(out, ";\nCOMMIT;\n") ||
		strings.Contains(out, "ROW LEVEL SECURITY") {
		t.Fatalf("migrate -print after granting: code %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
	code, out, errOut = run(t, "migrate", "-database-url", url, "-print")
	if code != 0 || !strings.Contains(out, "\nALTER TABLE pgtask.jobs DISABLE ROW LEVEL SECURITY;\n") {
		t.Fatalf("migrate -print without -own-jobs-only: code %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
	t.Setenv("PGTASK_OWN_JOBS_ONLY", "maybe")
	if code, _, errOut := run(t, "migrate", "-database-url", url); code != 2 || !strings.Contains(errOut, `$PGTASK_OWN_JOBS_ONLY is "maybe"`) {
		t.Fatalf("a bad $PGTASK_OWN_JOBS_ONLY: code %d, stderr %q", code, errOut)
	}
}

// The roles page (docs/roles.md) shows what migrate -print prints for a newly
// migrated database; it must stay what it prints, as functions come.
func TestRolesPageShowsWhatMigratePrints(t *testing.T) {
	t.Parallel()
	url := pgtasktest.NewDatabase(t)
	code, out, errOut := run(t, "migrate", "-database-url", url, "-print", "-own-jobs-only",
		"-roles", "producer=app_producer,worker=app_worker,admin=app_admin")
	if code != 0 {
		t.Fatalf("migrate -print: code %d, stderr %q", code, errOut)
	}
	page, err := os.ReadFile("../../../../docs/roles.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "```sql\n"+out+"```\n") {
		t.Errorf("docs/roles.md does not show what migrate -print prints now; replace its script with:\n%s", out)
	}
}

func TestGenReportsDeclarationErrors(t *testing.T) {
	t.Parallel()
	dir := "../codegen/testdata/errors/group"
	code, out, errOut := run(t, "gen", dir)
	// Positions are relative to the module's root, wherever gen runs.
	want := `cmd/pgtask/internal/codegen/testdata/errors/group/tasks.go:12: field B: TwoGroups already has a group field, A; a task has at most one`
	if code != 1 || out != "" || !strings.HasPrefix(errOut, want+"\n") || strings.Count(errOut, "\n") != 9 {
		t.Fatalf("code %d, stdout %q, stderr:\n%s\nwant exit 1 and nine file:line lines starting with %q", code, out, errOut, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "pgtask_gen.go")); !os.IsNotExist(err) {
		t.Fatalf("a file was written for a package with errors: %v", err)
	}
}

func TestGenWritesThenLeavesAlone(t *testing.T) {
	t.Parallel()
	// The package sits in a module of its own outside the tree, which
	// takes pgtask from this checkout (go/packages loads it as a user's).
	dir := t.TempDir()
	root, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	mod := "module example.com/gentest\n\ngo 1.26\n\nrequire github.com/pgtask/pgtask v0.0.0\n\nreplace github.com/pgtask/pgtask => " + root + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("../codegen/testdata/golden/basic/tasks.go")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tasks.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	// The module's requirements, from the module cache this build filled.
	list := exec.Command("go", "list", "-mod=mod", ".")
	list.Dir = dir
	list.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=")
	if out, err := list.CombinedOutput(); err != nil {
		t.Fatalf("go list in the test's module: %v\n%s", err, out)
	}
	code, out, errOut := run(t, "gen", "-o", "jobs_gen.go", dir)
	if code != 0 || out != "pgtask gen: wrote "+filepath.Join(dir, "jobs_gen.go")+"\n" {
		t.Fatalf("first gen: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	got, err := os.ReadFile(filepath.Join(dir, "jobs_gen.go"))
	if err != nil || !strings.HasPrefix(string(got), "// Code generated by pgtask. DO NOT EDIT.\n") ||
		!strings.Contains(string(got), "func EnqueueSendEmail(") {
		t.Fatalf("generated file: %v\n%s", err, got)
	}
	if code, out, errOut := run(t, "gen", "-o", "jobs_gen.go", dir); code != 0 || out != "" {
		t.Fatalf("second gen: code %d, stdout %q, stderr %q; want silence for an unchanged file", code, out, errOut)
	}
	if code, out, errOut := run(t, "gen", dir, "-json", "-o", "jobs_gen.go"); code != 0 ||
		strings.Join(strings.Fields(out), "") != `{"file":"`+filepath.Join(dir, "jobs_gen.go")+`","written":false}` {
		t.Fatalf("gen -json: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := run(t, "gen", "-o", "sub/x.go", dir); code != 2 || !strings.Contains(errOut, "without a directory") {
		t.Fatalf("-o with a directory: code %d, stderr %q", code, errOut)
	}
}

// The job commands on a database with jobs: what they print, as text and
// JSON, and their exit codes.
func TestJobCommands(t *testing.T) {
	t.Parallel()
	pool := pgtasktest.NewPool(t)
	url := pool.Config().ConnString()
	ctx := context.Background()
	reqs := []runtime.EnqueueRequest{}
	for range 3 {
		reqs = append(reqs, runtime.EnqueueRequest{Kind: "mail", Payload: []byte(`{"to":"a"}`), EnqueueOptions: runtime.EnqueueOptions{Queue: "emails"}})
	}
	reqs = append(reqs, runtime.EnqueueRequest{Kind: "report", Payload: []byte(`{}`), EnqueueOptions: runtime.EnqueueOptions{Queue: "reports", Metadata: map[string]string{"tenant": "acme"}}})
	ids, err := runtime.EnqueueMany(ctx, pool, reqs)
	if err != nil {
		t.Fatal(err)
	}
	db := []string{"-database-url", url}
	cmd := func(args ...string) []string { return append(args, db...) }

	// No worker runs: every runnable kind is one no live worker handles.
	code, out, errOut := run(t, cmd("stats")...)
	if code != 0 || !strings.Contains(out, "emails") || !strings.Contains(out, "reports") ||
		!strings.Contains(out, "runnable jobs of kinds no live worker handles") || !regexp.MustCompile(`emails +mail +3 `).MatchString(out) {
		t.Fatalf("stats: %d %q %q", code, out, errOut)
	}
	code, out, _ = run(t, cmd("stats", "-json")...)
	var st []struct {
		Queue          string           `json:"queue"`
		Counts         map[string]int64 `json:"counts"`
		UnhandledKinds []struct {
			Kind string `json:"kind"`
			Jobs int64  `json:"jobs"`
		} `json:"unhandled_kinds"`
	}
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st) != 2 || st[0].Counts["queued"] != 3 ||
		len(st[0].UnhandledKinds) != 1 || st[0].UnhandledKinds[0].Kind != "mail" || st[0].UnhandledKinds[0].Jobs != 3 {
		t.Fatalf("stats -json: %d %q (%v)", code, out, err)
	}
	code, out, _ = run(t, cmd("jobs", "list", "-queue", "emails", "-json", "-limit", "2")...)
	var list []struct {
		ID   int64  `json:"id"`
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 2 || list[0].ID != int64(ids[0]) {
		t.Fatalf("jobs list: %d %q (%v)", code, out, err)
	}
	code, out, _ = run(t, cmd("jobs", "list", "-queue", "emails", "-after", fmt.Sprint(list[1].ID))...)
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, fmt.Sprint(ids[2])) {
		t.Fatalf("jobs list, next page: %d %q", code, out)
	}
	code, out, _ = run(t, "jobs", "show", "-database-url", url, fmt.Sprint(ids[3]))
	if code != 0 || !strings.Contains(out, "kind report, queue reports") || !strings.Contains(out, "payload {}") ||
		!strings.Contains(out, "metadata tenant=acme\n") {
		t.Fatalf("jobs show: %d %q", code, out)
	}
	code, out, errOut = run(t, cmd("cancel", "-queue", "emails")...)
	if code != 0 || out != "cancelled 3 jobs\n" || !strings.Contains(errOut, "3 jobs looked at, 3 cancelled") {
		t.Fatalf("cancel: %d %q %q", code, out, errOut)
	}
	code, out, _ = run(t, cmd("retry", "-status", "cancelled", "-json")...)
	if code != 0 || strings.Join(strings.Fields(out), "") != `{"retried":3}` {
		t.Fatalf("retry: %d %q", code, out)
	}
	report := fmt.Sprint(ids[3])
	if code, out, errOut = run(t, append(cmd("cancel"), report)...); code != 0 || out != "cancelled 1 jobs\n" || errOut != "" {
		t.Fatalf("cancel %s: %d %q %q", report, code, out, errOut)
	}
	if code, out, errOut = run(t, append(cmd("cancel"), report)...); code != 1 || out != "cancelled 0 jobs\n" ||
		!strings.Contains(errOut, "job "+report+" is cancelled: only jobs that have not finished") {
		t.Fatalf("cancel %s again: %d %q %q", report, code, out, errOut)
	}
	if code, out, _ = run(t, append(cmd("retry", "-json"), report)...); code != 0 || strings.Join(strings.Fields(out), "") != `{"retried":1}` {
		t.Fatalf("retry %s: %d %q", report, code, out)
	}
	run(t, cmd("cancel", "-kind", "mail")...)
	if code, out, _ = run(t, cmd("purge", "-all")...); code != 0 || out != "deleted 3 jobs\n" {
		t.Fatalf("purge -all: %d %q", code, out)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{cmd("cancel"), 2, "no filter given"},
		{append(cmd("cancel", "-queue", "emails"), "1"), 2, "not both"},
		{append(cmd("purge"), "1"), 2, "takes filter flags, not job ids"},
		{append(cmd("retry"), "x"), 2, `"x" is not a job id`},
		{cmd("purge", "-status", "lost"), 2, `-status: "lost" is none of`},
		{[]string{"jobs", "show", "-database-url", url, "999999"}, 1, "job not found"},
		{[]string{"jobs", "show", "-database-url", url, "x"}, 2, "is not a job id"},
		{cmd("jobs"), 2, "usage: pgtask jobs list"},
		{cmd("jobs", "list", "-created-after", "yesterday"), 2, "-created-after"},
	} {
		if code, _, errOut := run(t, c.args...); code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("pgtask %v: code %d, stderr %q; want %d and %q", c.args[:2], code, errOut, c.code, c.want)
		}
	}
}
