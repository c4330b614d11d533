package runtime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/schema"
)

// Migration is one numbered schema file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

var migrationName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)

// Migrations returns pgtask's schema migrations in order. Version 0 is the
// bootstrap that every migration pass runs first; it is idempotent.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(schema.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		if e.IsDir() {
			continue // functions/: see schema.FunctionFiles
		}
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %q is not named NNNN_name.sql", e.Name())
		}
		version, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(schema.FS, e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		out = append(out, Migration{Version: version, Name: m[2], SQL: string(body)})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("two migrations numbered %04d", out[i].Version)
		}
	}
	return out, nil
}

// Beginner is anything that starts a transaction: *pgxpool.Pool, *pgx.Conn, pgx.Tx.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// MigrateReport says what Migrate changed.
type MigrateReport struct {
	// Migrations are the versions of the migrations applied, in order.
	Migrations []int
	// Functions are the function files applied (see package schema): those
	// new to the database or at a higher revision than the one it ran.
	Functions []FunctionFileRevision
	// Grants are the statements that gave the roles GrantRoles recorded
	// their privileges again, because theirs or PUBLIC's differed from what
	// they should be (as after function files created functions).
	Grants []string
}

// FunctionFileRevision names one revision of a function file.
type FunctionFileRevision struct {
	Name     string
	Revision int
}

// Changed reports whether Migrate changed anything.
func (r *MigrateReport) Changed() bool {
	return r != nil && (len(r.Migrations) > 0 || len(r.Functions) > 0 || len(r.Grants) > 0)
}

// String says what Migrate changed, a line for each migration and
// function file applied, and one for the grants; "pgtask schema is up to
// date" when it changed nothing.
func (r *MigrateReport) String() string {
	if !r.Changed() {
		return "pgtask schema is up to date"
	}
	var lines []string
	for _, v := range r.Migrations {
		lines = append(lines, fmt.Sprintf("applied migration %04d", v))
	}
	for _, f := range r.Functions {
		lines = append(lines, fmt.Sprintf("applied functions/%s (revision %d)", f.Name, f.Revision))
	}
	if len(r.Grants) > 0 {
		lines = append(lines, fmt.Sprintf("granted the recorded roles their privileges again (%d statements)", len(r.Grants)))
	}
	return strings.Join(lines, "\n")
}

// CheckSchema checks that db has pgtask's schema, as new as this code
// needs: what NewWorker checks before it starts, for tools that read or
// change jobs. Its error wraps ErrSchemaNotCurrent, names what is missing
// and says how to migrate.
func CheckSchema(ctx context.Context, db DB) error {
	return checkSchema(ctx, gen.New(db), databaseName(db))
}

// A migration's statements wait at most migrateLockTimeout for each table
// lock (lock_timeout). One that waits behind a long transaction on pgtask's
// tables holds up every enqueue and claim queued behind its own request, so
// it gives up instead, and Migrate tries again after a pause, for up to
// migratePatience (or until ctx is done).
const (
	migrateLockTimeout = 2 * time.Second
	migratePatience    = time.Minute
)

// ErrMigrationLocked is returned by Migrate when other sessions held locks on
// pgtask's tables through every try. The error names them.
var ErrMigrationLocked = errors.New("migration could not take its table locks")

// Migrate brings the pgtask schema up to date: it applies the migrations the
// database has not run, then every function file whose revision is higher
// than the one the database runs. A file at a lower revision than the
// database's is left alone: a newer release applied it, and an older worker
// starting during a rolling deploy must not put older bodies back. It runs
// in one transaction under an advisory lock, so concurrent callers (several
// workers starting at once) are safe: the first applies, the others find
// nothing to do. Last, if GrantRoles recorded roles, it gives them their
// privileges again when they differ from what they should be (functions
// that the files created are PUBLIC's to run until then, and not theirs).
//
// Each statement waits at most 2 seconds for a table lock, so that a
// migration stuck behind a long transaction does not stall the queues; the
// transaction is then rolled back and tried again after a pause, for up to
// a minute or until ctx is done. If the locks were never granted, Migrate
// returns ErrMigrationLocked, naming the sessions that held them.
func Migrate(ctx context.Context, db Beginner) (*MigrateReport, error) {
	migrations, err := Migrations()
	if err != nil {
		return nil, err
	}
	functions, err := schema.FunctionFiles()
	if err != nil {
		return nil, err
	}
	return migrate(ctx, db, migrations, functions)
}

// migrate is Migrate with the migrations and function files given.
func migrate(ctx context.Context, db Beginner, migrations []Migration, functions []schema.FunctionFile) (*MigrateReport, error) {
	began := time.Now()
	var delay retryDelay
	for tries := 1; ; tries++ {
		report, err := migrateOnce(ctx, db, migrations, functions)
		if !lockNotAvailable(err) {
			return report, err
		}
		wait := delay.next()
		deadline, ok := ctx.Deadline()
		if time.Since(began)+wait > migratePatience || (ok && time.Now().Add(wait+migrateLockTimeout).After(deadline)) {
			return nil, migrationLocked(ctx, db, err, tries, time.Since(began))
		}
		sleep(ctx, wait)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("migrate: %w", ctx.Err())
		}
	}
}

// lockNotAvailable reports whether err is a statement giving up on a lock
// (lock_timeout).
func lockNotAvailable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// migrationLocked describes a migration that never got its locks: how often
// it tried, and who held locks on pgtask's tables at the end.
func migrationLocked(ctx context.Context, db Beginner, last error, tries int, waited time.Duration) error {
	holders := "none found now"
	if tx, err := db.Begin(ctx); err == nil {
		rows, err := gen.New(tx).PgtaskLockHolders(ctx)
		tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read only
		if err == nil && len(rows) > 0 {
			var parts []string
			for _, r := range rows {
				parts = append(parts, fmt.Sprintf("pid %d (%s, application %q, in a transaction for %.0fs)",
					r.Pid, r.State, r.ApplicationName, r.TransactionSeconds))
			}
			holders = strings.Join(parts, "; ")
		}
	}
	return fmt.Errorf("%w: %d tries over %s each waited %s (lock_timeout) for a lock and gave up (%v); sessions holding locks on pgtask's tables: %s. "+
		"End or wait out their transactions (held-mode job transactions last as long as their handlers), then migrate again",
		ErrMigrationLocked, tries, waited.Round(time.Second), migrateLockTimeout, last, holders)
}

// migrateOnce is one try of Migrate, in one transaction.
func migrateOnce(ctx context.Context, db Beginner, migrations []Migration, functions []schema.FunctionFile) (*MigrateReport, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit

	q := gen.New(tx)
	if err := q.LockMigrations(ctx); err != nil {
		return nil, fmt.Errorf("migrate: lock: %w", err)
	}
	if err := q.SetMigrationLockTimeout(ctx, strconv.FormatInt(migrateLockTimeout.Milliseconds(), 10)); err != nil {
		return nil, fmt.Errorf("migrate: set lock_timeout: %w", err)
	}
	report := &MigrateReport{}
	if len(migrations) == 0 || migrations[0].Version != 0 {
		return nil, fmt.Errorf("migrate: no bootstrap migration 0000")
	}
	if _, err := tx.Exec(ctx, migrations[0].SQL); err != nil {
		return nil, fmt.Errorf("migrate: bootstrap: %w", err)
	}
	pending, err := pendingMigrations(ctx, q, migrations[1:])
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	for _, m := range pending {
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return nil, fmt.Errorf("migrate: apply %04d_%s: %w", m.Version, m.Name, err)
		}
		if err := q.RecordMigration(ctx, gen.RecordMigrationParams{Version: int32(m.Version), Name: m.Name}); err != nil {
			return nil, fmt.Errorf("migrate: record %04d_%s: %w", m.Version, m.Name, err)
		}
		report.Migrations = append(report.Migrations, m.Version)
	}

	report.Functions, err = applyFunctionFiles(ctx, tx, functions)
	if err != nil {
		return nil, err
	}
	if report.Grants, err = q.RegrantRoles(ctx); err != nil {
		return nil, fmt.Errorf("migrate: grant the recorded roles their privileges again: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("migrate: commit: %w", err)
	}
	return report, nil
}

// applyFunctionFiles applies, in tx, the files whose revision is higher than
// the one the database runs, and returns them.
func applyFunctionFiles(ctx context.Context, tx pgx.Tx, files []schema.FunctionFile) ([]FunctionFileRevision, error) {
	q := gen.New(tx)
	stale, err := staleFunctionFiles(ctx, q, files)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	var out []FunctionFileRevision
	for _, f := range stale {
		if _, err := tx.Exec(ctx, f.SQL); err != nil {
			return nil, fmt.Errorf("migrate: apply functions/%s (revision %d): %w", f.Name, f.Revision, err)
		}
		if err := q.RecordFunctionFile(ctx, gen.RecordFunctionFileParams{Name: f.Name, Revision: int32(f.Revision), Sha256: f.SHA256}); err != nil {
			return nil, fmt.Errorf("migrate: record functions/%s: %w", f.Name, err)
		}
		out = append(out, FunctionFileRevision{Name: f.Name, Revision: f.Revision})
	}
	return out, nil
}

// pendingMigrations returns those of migrations the database has not applied.
func pendingMigrations(ctx context.Context, q *gen.Queries, migrations []Migration) ([]Migration, error) {
	versions, err := q.AppliedMigrations(ctx)
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	names := map[int]string{}
	for _, m := range migrations {
		names[m.Version] = m.Name
	}
	done := map[int]bool{}
	for _, v := range versions {
		// A migration recorded under another name than this build's of the
		// same number was another migration: the database was migrated by
		// a build from before the baseline, and what it holds is not what
		// this build's migrations would have made.
		if name, ok := names[int(v.Version)]; ok && name != v.Name {
			return nil, fmt.Errorf("%w: the database records migration %04d as %q, but this build's migration %04d is %q: "+
				"it was migrated by a build of pgtask from before its first release; recreate the database",
				ErrSchemaNotCurrent, v.Version, v.Name, v.Version, name)
		}
		done[int(v.Version)] = true
	}
	var pending []Migration
	for _, m := range migrations {
		if !done[m.Version] {
			pending = append(pending, m)
		}
	}
	return pending, nil
}

// staleFunctionFile is a function file at a higher revision than the one
// the database runs (running is 0 for a file it never ran).
type staleFunctionFile struct {
	schema.FunctionFile
	running int
}

// staleFunctionFiles returns those of files the database runs an older
// revision of, or none of.
func staleFunctionFiles(ctx context.Context, q *gen.Queries, files []schema.FunctionFile) ([]staleFunctionFile, error) {
	applied, err := q.AppliedFunctionFiles(ctx)
	if err != nil {
		return nil, fmt.Errorf("read applied function files: %w", err)
	}
	running := map[string]int{}
	for _, a := range applied {
		running[a.Name] = int(a.Revision)
	}
	var stale []staleFunctionFile
	for _, f := range files {
		if rev := running[f.Name]; rev < f.Revision {
			stale = append(stale, staleFunctionFile{FunctionFile: f, running: rev})
		}
	}
	return stale, nil
}
