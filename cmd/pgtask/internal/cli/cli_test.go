package cli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/cmd/pgtask/internal/cli"
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
	if code != 0 || !strings.Contains(out, "applied migration 0001") {
		t.Fatalf("first migrate: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = run(t, "migrate", "-database-url", url)
	if code != 0 || out != "pgtask schema is up to date\n" {
		t.Fatalf("second migrate: code %d, stdout %q, stderr %q", code, out, errOut)
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
		{[]string{"migrate"}, 1, "no database: set DATABASE_URL or pass -database-url"},
		{[]string{"migrate", "-nope"}, 2, "flag provided but not defined: -nope"},
		{[]string{"migrate", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"migrate", "-database-url", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2"}, 1, "pgtask migrate: connect:"},
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
