package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/runtime"
)

const migrateUsage = `usage: pgtask migrate [-database-url URL]
       [-roles producer=NAME,worker=NAME,admin=NAME [-own-jobs-only] [-create-roles] [-print]]

Applies pgtask's schema migrations and function files. With -roles it then
gives each role named the privileges its part needs, and no others, and
takes every privilege on pgtask's schema from PUBLIC:
  producer  enqueues, and reads jobs (with -own-jobs-only, only those its
            login enqueued)
  worker    works jobs: what a pgtask worker does
  admin     operations: the pgtask commands other than gen and migrate
Name any of them; one role may take several parts. Run it as the owner of
pgtask's schema. The roles are recorded: later migrations keep their
privileges right. With -print it prints the SQL that grants the roles,
for applications that manage roles themselves, and changes nothing.

`

// Environment variables that give the role flags their defaults, so that a
// deployment configures them once.
const (
	rolesEnv       = "PGTASK_ROLES"
	ownJobsOnlyEnv = "PGTASK_OWN_JOBS_ONLY"
	createRolesEnv = "PGTASK_CREATE_ROLES"
)

// roleFlags are migrate's flags that grant roles.
type roleFlags struct {
	roles               string
	ownJobsOnly, create bool
	print               bool
}

// addRoleFlags adds the role flags to fs, with their defaults from the
// environment.
func addRoleFlags(fs *flag.FlagSet) (*roleFlags, error) {
	own, err := envBool(ownJobsOnlyEnv)
	if err != nil {
		return nil, err
	}
	create, err := envBool(createRolesEnv)
	if err != nil {
		return nil, err
	}
	rf := &roleFlags{}
	fs.StringVar(&rf.roles, "roles", os.Getenv(rolesEnv),
		"grant pgtask's privileges to these roles, as producer=NAME,worker=NAME,admin=NAME, any of them (default $"+rolesEnv+")")
	fs.BoolVar(&rf.ownJobsOnly, "own-jobs-only", own,
		"with -roles: the producer reads only the jobs its login enqueued (row-level security; default $"+ownJobsOnlyEnv+")")
	fs.BoolVar(&rf.create, "create-roles", create,
		"with -roles: create the roles that do not exist, as LOGIN roles without a password (default $"+createRolesEnv+")")
	fs.BoolVar(&rf.print, "print", false,
		"with -roles: print the SQL that grants the roles and change nothing; the database must be migrated")
	return rf, nil
}

// envBool reads a boolean from the environment variable name; unset or
// empty is false.
func envBool(name string) (bool, error) {
	v := os.Getenv(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("$%s is %q: want true or false", name, v)
	}
	return b, nil
}

// parse returns the roles the flags name; none when -roles is empty.
func (rf *roleFlags) parse() (runtime.Roles, error) {
	r := runtime.Roles{OwnJobsOnly: rf.ownJobsOnly, Create: rf.create}
	if strings.TrimSpace(rf.roles) == "" {
		if rf.ownJobsOnly || rf.create || rf.print {
			return r, errors.New("-own-jobs-only, -create-roles and -print need -roles")
		}
		return r, nil
	}
	parts := map[string]*string{"producer": &r.Producer, "worker": &r.Worker, "admin": &r.Admin}
	for _, item := range strings.Split(rf.roles, ",") {
		kind, name, ok := strings.Cut(strings.TrimSpace(item), "=")
		kind, name = strings.TrimSpace(kind), strings.TrimSpace(name)
		to, known := parts[kind]
		switch {
		case !ok || name == "":
			return r, fmt.Errorf("-roles: %q is not PART=ROLE (producer=NAME, worker=NAME or admin=NAME)", item)
		case !known:
			return r, fmt.Errorf("-roles: %q: the parts are producer, worker and admin", kind)
		case *to != "":
			return r, fmt.Errorf("-roles: the %s is named twice", kind)
		}
		*to = name
	}
	return r, nil
}

// named reports whether r names any role.
func named(r runtime.Roles) bool {
	return r.Producer != "" || r.Worker != "" || r.Admin != ""
}

// printRoles prints the statements that grant roles, each ending with a
// semicolon, as a script to run in one transaction; with asJSON, as a JSON
// array of statements.
func printRoles(ctx context.Context, conn *pgx.Conn, roles runtime.Roles, asJSON bool, stdout io.Writer) error {
	statements, err := runtime.RolesSQL(ctx, conn, roles)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, statements)
	}
	fmt.Fprintln(stdout, "BEGIN;")
	for _, s := range statements {
		fmt.Fprintf(stdout, "%s;\n", s)
	}
	fmt.Fprintln(stdout, "COMMIT;")
	return nil
}

// grantedRoles is what migrate -json says of the roles it granted.
type grantedRoles struct {
	Producer    string `json:"producer,omitempty"`
	Worker      string `json:"worker,omitempty"`
	Admin       string `json:"admin,omitempty"`
	OwnJobsOnly bool   `json:"own_jobs_only"`
	Statements  int    `json:"statements"`
}

// grantRoles grants the roles named, if any, and says so on stdout, or
// fills in into instead when it is not nil.
func grantRoles(ctx context.Context, conn *pgx.Conn, roles runtime.Roles, stdout io.Writer, into *grantedRoles) error {
	if !named(roles) {
		return nil
	}
	statements, err := runtime.GrantRoles(ctx, conn, roles)
	if err != nil {
		return err
	}
	if into != nil {
		*into = grantedRoles{roles.Producer, roles.Worker, roles.Admin, roles.OwnJobsOnly, len(statements)}
		return nil
	}
	var parts []string
	for _, p := range []struct{ kind, name string }{{"producer", roles.Producer}, {"worker", roles.Worker}, {"admin", roles.Admin}} {
		if p.name != "" {
			parts = append(parts, p.kind+" "+p.name)
		}
	}
	own := ""
	if roles.OwnJobsOnly {
		own = ", the producer reading its own jobs only"
	}
	fmt.Fprintf(stdout, "granted pgtask's privileges to %s%s (%d statements)\n",
		strings.Join(parts, ", "), own, len(statements))
	return nil
}
