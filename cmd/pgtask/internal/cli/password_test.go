package cli_test

import (
	"strings"
	"testing"
)

// every command that takes a database, with the arguments it needs.
var databaseCommands = [][]string{
	{"migrate"}, {"stats"}, {"jobs", "list"}, {"jobs", "show", "1"}, {"retry", "1"}, {"cancel", "1"},
	{"purge", "-all"}, {"pause", "q"}, {"resume", "q"}, {"ui", "-addr", "127.0.0.1:0"},
}

// withDB puts -database-url url right after the command's name, before its
// other flags and arguments.
func withDB(url string, args ...string) []string {
	n := 1
	if args[0] == "jobs" {
		n = 2
	}
	return append(append(append([]string(nil), args[:n]...), "-database-url", url), args[n:]...)
}

// No command prints the password of the database it is given: not in its
// help text, where -database-url shows its default, $DATABASE_URL, nor in
// an error. Not parallel: it sets DATABASE_URL.
func TestCommandsHideThePassword(t *testing.T) {
	const secret = "s3cr3t"
	for _, dsn := range []string{
		"postgres://postgres:" + secret + "@127.0.0.1:1/x?connect_timeout=2",
		"postgres://postgres@127.0.0.1:1/x?connect_timeout=2&password=" + secret,
		"host=127.0.0.1 port=1 user=postgres password=" + secret + " dbname=x connect_timeout=2",
		"host=127.0.0.1 port=1 password='" + secret + " x' dbname=x",
		"postgres://postgres:" + secret + "@127.0.0.1:notaport/x",
	} {
		t.Setenv("DATABASE_URL", dsn)
		for _, args := range databaseCommands {
			name := strings.Join(args[:1], " ")
			if args[0] == "jobs" {
				name = strings.Join(args[:2], " ")
			}
			help := append(strings.Fields(name), "-h")
			code, out, errOut := run(t, help...)
			if code != 0 || !strings.Contains(errOut, "-database-url") || strings.Contains(out+errOut, secret) {
				t.Errorf("DATABASE_URL=%q pgtask %s: code %d, stdout %q, stderr:\n%s\nwant exit 0, the flags, and no password",
					dsn, strings.Join(help, " "), code, out, errOut)
			}
			code, out, errOut = run(t, args...)
			if code != 1 || strings.Contains(out+errOut, secret) {
				t.Errorf("DATABASE_URL=%q pgtask %s: code %d, stdout %q, stderr %q; want exit 1 and no password",
					dsn, strings.Join(args, " "), code, out, errOut)
			}
		}
	}
	// A URL given where an argument goes is named in the error, without
	// its password.
	t.Setenv("DATABASE_URL", "")
	code, _, errOut := run(t, "migrate", "postgres://postgres:"+secret+"@127.0.0.1/x")
	if code != 2 || !strings.Contains(errOut, `unexpected argument "postgres://postgres:xxxxx@127.0.0.1/x"`) {
		t.Errorf("migrate URL: code %d, stderr %q; want 2 and the URL without its password", code, errOut)
	}
}
