// Package cli implements the pgtask command; main only wires it to the
// process, so tests call Run directly.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/cmd/pgtask/internal/codegen"
	pgtaskdb "github.com/pgtask/pgtask/gen"

	"github.com/pgtask/pgtask/runtime"
)

const usage = `usage: pgtask <command> [flags]

commands:
  gen       generate typed Enqueue/Handle functions for the tasks in a package
            (what //go:generate go run github.com/pgtask/pgtask/cmd/pgtask gen runs)
  migrate   apply pgtask's schema migrations to a database, and grant roles
  stats     jobs per queue and status (runnable, on a limit, on a rate), oldest wait, blocked groups, paused queues
  jobs      list jobs by filter, or show one (pgtask jobs list|show)
  batches   show a batch: its jobs' counts and its callbacks (pgtask batches show)
  workflows list workflows, or show one: its state, its steps' counts and a page of its steps (pgtask workflows list|show)
  retry     retry the failed and cancelled jobs a filter matches
  cancel    cancel the jobs a filter matches, running ones included
  purge     delete the finished jobs a filter matches
  pause     pause queues: no worker claims their jobs until they are resumed
  limits    list concurrency limits, or set and clear operators' limits (pgtask limits set|clear)
  rates     list rate limits, or set and clear operators' rates (pgtask rates set|clear)
  resume    resume paused queues
  tenants   list fair queues' tenants, set a tenant's weight, make a queue fair (pgtask tenants weight|fair)
  ui        serve the web dashboard: queues, jobs, groups, limits, tenants, batches, workflows, and actions on them
  help      show this text

Run 'pgtask <command> -h' for a command's flags; flags go before or after
the arguments (after -- every word is an argument). Commands that use a
database read it from -database-url or $DATABASE_URL, and take -json to
print JSON. Exit status: 0 done, 1 failed (acting on nothing included),
2 wrong usage.
`

// Run runs the command in args and returns the process exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// Help, errors and logs name databases; none shows a password.
	stderr = redactingWriter{stderr}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "gen":
		err = gen(args[1:], stdout, stderr)
	case "migrate":
		err = migrate(ctx, args[1:], stdout, stderr)
	case "pause", "resume":
		err = pauseResume(ctx, args[0], args[1:], stdout, stderr)
	case "stats":
		err = stats(ctx, args[1:], stdout, stderr)
	case "jobs":
		err = jobs(ctx, args[1:], stdout, stderr)
	case "batches":
		err = batches(ctx, args[1:], stdout, stderr)
	case "workflows":
		err = workflows(ctx, args[1:], stdout, stderr)
	case "limits":
		err = limits(ctx, args[1:], stdout, stderr)
	case "rates":
		err = rates(ctx, args[1:], stdout, stderr)
	case "tenants":
		err = tenants(ctx, args[1:], stdout, stderr)
	case "retry", "cancel", "purge":
		err = bulkCommand(ctx, args[0], args[1:], stdout, stderr)
	case "ui":
		err = ui(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "pgtask: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.As(err, new(codegen.Errors)), errors.As(err, new(codegen.Error)):
		// file:line: message, one per line, as compilers print them.
		fmt.Fprintln(stderr, err)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "pgtask %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// errUsage means the flags were wrong; the flag package has said why.
var errUsage = errors.New("usage")

func gen(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pgtask gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: pgtask gen [-o file] [-json] [package dir]\n\n"+
			"Generates the typed task functions of the package in dir (default: the current directory).\n"+
			"It writes the file only when it changes, and says so.")
		fs.PrintDefaults()
	}
	out := fs.String("o", codegen.DefaultOutput, "name of the generated file in the package directory")
	asJSON := jsonFlag(fs)
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 1 {
		fmt.Fprintf(stderr, "pgtask gen: want at most one package directory, got %d\n", len(rest))
		return errUsage
	}
	dir := "."
	if len(rest) == 1 {
		dir = rest[0]
	}
	if *out != filepath.Base(*out) || !strings.HasSuffix(*out, ".go") || strings.HasSuffix(*out, "_test.go") {
		fmt.Fprintf(stderr, "pgtask gen: -o %q: want a file name ending in .go (not _test.go), without a directory\n", *out)
		return errUsage
	}
	// Positions in errors are relative to the module's root, wherever this runs.
	wrote, err := codegen.Write(dir, *out)
	if err != nil {
		return err
	}
	file := filepath.Join(dir, *out)
	switch {
	case *asJSON:
		return printJSON(stdout, struct {
			File    string `json:"file"`
			Written bool   `json:"written"`
		}{file, wrote})
	case wrote:
		fmt.Fprintf(stdout, "pgtask gen: wrote %s\n", file)
	}
	return nil
}

func migrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pgtask migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, migrateUsage)
		fs.PrintDefaults()
	}
	url := databaseFlag(fs)
	asJSON := jsonFlag(fs)
	rf, err := addRoleFlags(fs)
	if err != nil {
		fmt.Fprintf(stderr, "pgtask migrate: %v\n", err)
		return errUsage
	}
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "pgtask migrate: unexpected argument %q\n", rest[0])
		return errUsage
	}
	roles, err := rf.parse()
	if err != nil {
		fmt.Fprintf(stderr, "pgtask migrate: %v\n", err)
		return errUsage
	}
	// Migrating is what a database without pgtask's schema needs; -print
	// checks the schema itself.
	conn, err := connect(ctx, *url, false)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if rf.print {
		return printRoles(ctx, conn, roles, *asJSON, stdout)
	}
	report, err := runtime.Migrate(ctx, conn)
	if err != nil {
		return err
	}
	if !*asJSON {
		fmt.Fprintln(stdout, report)
		return grantRoles(ctx, conn, roles, stdout, nil)
	}
	type function struct {
		Name     string `json:"name"`
		Revision int    `json:"revision"`
	}
	out := struct {
		Migrations []int         `json:"migrations"`
		Functions  []function    `json:"functions"`
		Grants     int           `json:"grants"`
		Roles      *grantedRoles `json:"roles,omitempty"`
	}{Migrations: append([]int{}, report.Migrations...), Functions: []function{}, Grants: len(report.Grants)}
	for _, f := range report.Functions {
		out.Functions = append(out.Functions, function{f.Name, f.Revision})
	}
	if named(roles) {
		out.Roles = &grantedRoles{}
		if err := grantRoles(ctx, conn, roles, nil, out.Roles); err != nil {
			return err
		}
	}
	return printJSON(stdout, out)
}

// pauseResume pauses or resumes the queues named in args.
func pauseResume(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pgtask "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		if cmd == "pause" {
			fmt.Fprintln(stderr, "usage: pgtask pause [-create] [-json] [-database-url URL] queue...\n\n"+
				"Pauses the queues across every worker: no claim takes their jobs until they are resumed.\n"+
				"Running jobs finish; enqueueing goes on. A queue that has no jobs is taken for a misspelt\n"+
				"name and nothing is paused, unless -create says to pause it before its first job.")
		} else {
			fmt.Fprintln(stderr, "usage: pgtask resume [-json] [-database-url URL] queue...\n\n"+
				"Resumes paused queues and wakes their workers. A queue that is not paused and has no jobs\n"+
				"is taken for a misspelt name, and nothing is resumed.")
		}
		fs.PrintDefaults()
	}
	url := databaseFlag(fs)
	asJSON := jsonFlag(fs)
	create := false
	if cmd == "pause" {
		fs.BoolVar(&create, "create", false, "pause queues that have no jobs yet too")
	}
	queues, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(queues) == 0 {
		fmt.Fprintf(stderr, "pgtask %s: name at least one queue\n", cmd)
		return errUsage
	}
	for _, q := range queues {
		if msg := badQueueName(q); msg != "" {
			fmt.Fprintf(stderr, "pgtask %s: %s\n", cmd, msg)
			return errUsage
		}
	}
	queues = unique(queues)
	conn, err := connect(ctx, *url, true)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// Every name must be known before any queue changes. The queues with
	// runnable jobs, groups or a pause are found along indexes; any other
	// name is looked for among all the jobs.
	known, err := pgtaskdb.New(conn).DashboardQueueNames(ctx)
	if err != nil {
		return fmt.Errorf("list queues: %w", err)
	}
	for _, q := range queues {
		if create || slices.Contains(known, q) {
			continue
		}
		jobs, err := runtime.ListJobs(ctx, conn, runtime.JobFilter{Queue: q}, 0, 1)
		if err != nil {
			return err
		}
		if len(jobs) > 0 {
			continue
		}
		if cmd == "pause" {
			return fmt.Errorf("queue %s has no jobs: check its name, or pass -create to pause it before its first job; no queue was paused", q)
		}
		return fmt.Errorf("queue %s is not paused and has no jobs: check its name; no queue was resumed", q)
	}
	type result struct {
		Queue   string `json:"queue"`
		Paused  bool   `json:"paused"`
		Changed bool   `json:"changed"`
	}
	var results []result
	for _, queue := range queues {
		r := result{Queue: queue, Paused: cmd == "pause"}
		if cmd == "pause" {
			r.Changed, err = runtime.PauseQueue(ctx, conn, queue)
		} else {
			r.Changed, err = runtime.ResumeQueue(ctx, conn, queue)
		}
		if err != nil {
			return err
		}
		results = append(results, r)
		if *asJSON {
			continue
		}
		switch {
		case r.Paused && r.Changed:
			fmt.Fprintf(stdout, "paused queue %s\n", queue)
		case r.Paused:
			fmt.Fprintf(stdout, "queue %s was paused already\n", queue)
		case r.Changed:
			fmt.Fprintf(stdout, "resumed queue %s\n", queue)
		default:
			fmt.Fprintf(stdout, "queue %s was not paused\n", queue)
		}
	}
	if *asJSON {
		return printJSON(stdout, results)
	}
	return nil
}

// unique returns the distinct words of words, in their first order.
func unique(words []string) []string {
	var out []string
	for _, w := range words {
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

// badQueueName says what is wrong with a queue's name; "" when nothing is.
func badQueueName(q string) string {
	switch {
	case q == "":
		return "a queue name is empty"
	case len(q) > runtime.MaxQueueBytes:
		return fmt.Sprintf("queue name is %d bytes, more than the %d allowed", len(q), runtime.MaxQueueBytes)
	case !utf8.ValidString(q):
		return fmt.Sprintf("queue name %q is not valid UTF-8", q)
	case strings.IndexByte(q, 0) >= 0:
		return fmt.Sprintf("queue name %q contains a NUL byte", q)
	}
	return ""
}

// databaseURL is the value of -database-url. It shows its password, in
// help text, as xxxxx.
type databaseURL struct{ url string }

func (d *databaseURL) String() string {
	if d == nil {
		return ""
	}
	return runtime.RedactDSN(d.url)
}

func (d *databaseURL) Set(s string) error {
	d.url = s
	return nil
}

// databaseFlag adds the -database-url flag, which defaults to $DATABASE_URL.
func databaseFlag(fs *flag.FlagSet) *string {
	d := &databaseURL{os.Getenv("DATABASE_URL")}
	fs.Var(d, "database-url", "the database, as a URL or key=value settings (default $DATABASE_URL, shown without its password)")
	return &d.url
}

// jsonFlag adds the -json flag.
func jsonFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("json", false, "print JSON, for scripts")
}

// errNoDatabase is what a command that needs a database says without one.
var errNoDatabase = errors.New("no database: DATABASE_URL is not set and -database-url is not given; " +
	"set DATABASE_URL=postgres://USER@HOST:5432/DATABASE (with :PASSWORD after USER if it needs one), or pass it as -database-url")

// databaseConfig parses url. A connection string that names no database
// gets the one the server would pick, the user's, so that messages name it.
func databaseConfig(url string) (*pgx.ConnConfig, error) {
	if url == "" {
		return nil, errNoDatabase
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if cfg.Database == "" {
		cfg.Database = cfg.User
	}
	return cfg, nil
}

// connect connects to the database url names; with checkSchema, it then
// checks that pgtask's schema there is as new as this command, as a worker
// does, so that an unmigrated database is named as one.
func connect(ctx context.Context, url string, checkSchema bool) (*pgx.Conn, error) {
	cfg, err := databaseConfig(url)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if checkSchema {
		if err := runtime.CheckSchema(ctx, conn); err != nil {
			conn.Close(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return conn, nil
}

// parseFlags parses args with fs, taking flags before, between and after
// the arguments alike (after "--" every word is an argument), and returns
// the arguments. A bad flag, which fs has described, is errUsage; -h is
// flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		left := fs.Args()
		if len(left) == 0 {
			return rest, nil
		}
		if used := len(args) - len(left); used > 0 && args[used-1] == "--" {
			return append(rest, left...), nil
		}
		rest, args = append(rest, left[0]), left[1:]
	}
}
