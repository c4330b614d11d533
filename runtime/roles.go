package runtime

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/gen"
)

// Roles names the database roles that share pgtask's work, each with the
// privileges its part needs and no others (see GrantRoles). An empty name
// is no role. One role may take more than one part (an application that
// enqueues and works jobs), and then has the privileges of each. The role
// that owns pgtask's schema, the one that migrates, is none of them.
type Roles struct {
	// Producer enqueues jobs, and reads jobs: their status, result, error
	// history and payload (GetJob, the generated GetTResult, ListJobs,
	// CountJobs). It enqueues only through pgtask's enqueue functions,
	// which run as the schema's owner and check what they insert: it has no
	// privilege to write any table, so it cannot insert a row that breaks
	// the table's checks or a group's order, nor change a job's status.
	Producer string
	// Worker works jobs: NewWorker and Run, in either mode, with
	// maintenance, the leader's duties (retention, periodic jobs), and
	// enqueueing from handlers; its maintenance carries out the cancel
	// requests of jobs that an admin filed. It cannot retry or delete jobs
	// by the operators' functions, nor pause queues.
	Worker string
	// Admin runs operations: CancelJob(s), RetryJob(s), DeleteJobs,
	// PauseQueue, ResumeQueue, PausedQueues, SetLimit, SetEveryKeyLimit,
	// Limits, LimitOverrides, Stats, ListJobs, CountJobs, GetJob and
	// GetJobLimit (the pgtask commands other than migrate and gen). It cannot
	// enqueue, claim or settle jobs, nor migrate.
	Admin string
	// OwnJobsOnly limits what a producer reads to the jobs enqueued by its
	// session's login role (session_user, recorded with each job), by
	// row-level security on pgtask.jobs; others' jobs are not found. Jobs
	// enqueued by workers (periodic jobs, handlers) are none of a
	// producer's. A role that is also the worker
	// or the admin reads every job.
	OwnJobsOnly bool
	// Create creates those of the roles that do not exist, as LOGIN roles
	// without a password: set one (ALTER ROLE ... PASSWORD), or let them in
	// another way. It needs the CREATEROLE privilege.
	Create bool
}

// any reports whether r names a role.
func (r Roles) any() bool {
	return r.Producer != "" || r.Worker != "" || r.Admin != ""
}

func (r Roles) params(apply bool) gen.GrantRolesParams {
	return gen.GrantRolesParams{
		Producer: r.Producer, Worker: r.Worker, Admin: r.Admin,
		OwnJobsOnly: r.OwnJobsOnly, CreateRoles: r.Create, Apply: apply,
	}
}

var errNoRoles = errors.New("name at least one role: the producer, the worker or the admin")

// GrantRoles gives the roles r names their privileges on pgtask's objects
// (see Roles), and takes every other privilege on them from those roles,
// from the roles it granted to before, and from PUBLIC. It records the
// roles in the database: Migrate then gives them their privileges on
// functions that later releases add, which PostgreSQL would otherwise let
// PUBLIC run and not them. It returns the SQL statements it ran.
//
// Run it as the owner of pgtask's schema (the role that migrates), on a
// database that Migrate brought up to date, and again whenever the roles
// change. Like Migrate, it holds the migration lock, and a statement that
// locks pgtask.jobs (switching OwnJobsOnly, which turns row-level security
// on or off) waits at most 2 seconds for the lock, retrying for up to a
// minute; ErrMigrationLocked says who held it.
func GrantRoles(ctx context.Context, db Beginner, r Roles) ([]string, error) {
	if !r.any() {
		return nil, fmt.Errorf("grant roles: %w", errNoRoles)
	}
	var statements []string
	err := withMigrationLock(ctx, db, func(tx pgx.Tx) error {
		q := gen.New(tx)
		if err := checkSchema(ctx, q, databaseName(tx)); err != nil {
			return err
		}
		var err error
		statements, err = q.GrantRoles(ctx, r.params(true))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("grant roles: %w", err)
	}
	return statements, nil
}

// RolesSQL returns the SQL statements GrantRoles would run now, without
// running them, for applications that manage their roles themselves:
// run them as the owner of pgtask's schema, in one transaction. The
// database must be migrated; the statements name its functions, and
// switch row-level security only if it is not as r asks. Unlike
// GrantRoles they do not record the roles, so Migrate does not grant them
// the functions of later releases: run them again after each migration.
func RolesSQL(ctx context.Context, db DB, r Roles) ([]string, error) {
	if !r.any() {
		return nil, fmt.Errorf("roles sql: %w", errNoRoles)
	}
	q := gen.New(db)
	if err := checkSchema(ctx, q, databaseName(db)); err != nil {
		return nil, fmt.Errorf("roles sql: %w", err)
	}
	statements, err := q.GrantRoles(ctx, r.params(false))
	if err != nil {
		return nil, fmt.Errorf("roles sql: %w", err)
	}
	return statements, nil
}

// DropRoles takes every privilege on pgtask's objects from the roles named,
// forgets them as roles GrantRoles granted to, and drops them (DROP ROLE,
// which fails if they own objects or have privileges in other databases).
// Names of roles that do not exist are passed over. It returns the SQL
// statements it ran. Run it as the owner of pgtask's schema, with the
// CREATEROLE privilege.
func DropRoles(ctx context.Context, db Beginner, names ...string) ([]string, error) {
	var statements []string
	err := withMigrationLock(ctx, db, func(tx pgx.Tx) error {
		var err error
		statements, err = gen.New(tx).DropRoles(ctx, names)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("drop roles: %w", err)
	}
	return statements, nil
}

// withMigrationLock runs fn in a transaction that holds the migration lock
// (so that it never runs beside Migrate or another call) and bounds each
// statement's wait for a table lock, as Migrate does, trying again after a
// pause when one gave up, for up to a minute.
func withMigrationLock(ctx context.Context, db Beginner, fn func(pgx.Tx) error) error {
	began := time.Now()
	var delay retryDelay
	for tries := 1; ; tries++ {
		err := inMigrationLock(ctx, db, fn)
		if !lockNotAvailable(err) {
			return err
		}
		wait := delay.next()
		if time.Since(began)+wait > migratePatience {
			return migrationLocked(ctx, db, err, tries, time.Since(began))
		}
		sleep(ctx, wait)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func inMigrationLock(ctx context.Context, db Beginner, fn func(pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	q := gen.New(tx)
	if err := q.LockMigrations(ctx); err != nil {
		return fmt.Errorf("take the migration lock: %w", err)
	}
	if err := q.SetMigrationLockTimeout(ctx, strconv.FormatInt(migrateLockTimeout.Milliseconds(), 10)); err != nil {
		return fmt.Errorf("set lock_timeout: %w", err)
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// databaseName is the name of the database db is connected to, for errors
// (empty when db does not say).
func databaseName(db DB) string {
	switch d := db.(type) {
	case *pgxpool.Pool:
		return d.Config().ConnConfig.Database
	case *pgx.Conn:
		return d.Config().Database
	case pgx.Tx:
		return d.Conn().Config().Database
	}
	return ""
}
