package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/schema"
)

var (
	// ErrSchemaNotCurrent is returned by NewWorker when the database lacks
	// pgtask's schema, or has an older one than the worker's code needs.
	// Migrate (or `pgtask migrate`) brings it up to date.
	ErrSchemaNotCurrent = errors.New("pgtask schema is not current")
	// ErrNotEnoughConnections is returned by NewWorker when the server
	// cannot give the worker its connections (Config.MaxConns) and still
	// leave room for everyone else, or when they are too few for its
	// queues.
	ErrNotEnoughConnections = errors.New("not enough database connections for the worker")
)

// checkDatabase connects once, on a connection of its own, and checks that
// the worker can work: the database is there, its schema is as new as this
// code, and the server has room for need more connections as check says
// (see ConnectionCheck). It is the difference between one clear error at
// start and a worker that logs failures forever, or one that takes every
// connection of the server.
func checkDatabase(ctx context.Context, cc *pgx.ConnConfig, need int, check ConnectionCheck) error {
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("connect to the database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck // read-only session
	q := gen.New(conn)
	if err := checkSchema(ctx, q, cc.Database); err != nil {
		return err
	}
	if check == CheckNone {
		return nil
	}
	c, err := q.ConnectionCapacity(ctx)
	if err != nil {
		return fmt.Errorf("read the server's connection limits: %w", err)
	}
	margin := max(3, int(c.MaxConnections)/10)
	allowed := int(c.MaxConnections - c.Reserved)
	// The checking connection is counted in use, and is gone once the
	// worker opens its own.
	open := int(c.InUse) - 1
	free := allowed - open
	if need <= allowed-margin && (check == CheckMax || need <= free-margin) {
		return nil
	}
	fix := "lower Config.MaxConns (or the Concurrency it defaults from), or raise max_connections"
	if need <= allowed-margin {
		fix = "lower Config.MaxConns (or the Concurrency it defaults from), close some of the other sessions, " +
			"or set Config.ConnectionCheck to CheckMax if they are about to go (a rolling deploy)"
	}
	return fmt.Errorf("%w: it would open up to %d connections (its MaxConns, the pool's yet to open for a worker on the application's pool); "+
		"the server allows %d (max_connections %d, %d reserved for superusers), %d are open, and %d are left for others: %s",
		ErrNotEnoughConnections, need, allowed, c.MaxConnections, c.Reserved, open, margin, fix)
}

// checkIsolation checks that a pool the application lends the worker gives
// its sessions READ COMMITTED by default: maintenance runs on it in
// statements of their own.
func checkIsolation(ctx context.Context, pool *pgxpool.Pool) error {
	level, err := gen.New(pool).DefaultIsolation(ctx)
	if err != nil {
		return fmt.Errorf("read the pool's default isolation level: %w", err)
	}
	if level != "read committed" {
		return fmt.Errorf("the pool's sessions default to %s isolation, and pgtask's worker needs READ COMMITTED: "+
			`set RuntimeParams["default_transaction_isolation"] = "read committed" in the pool's config, or use NewWorker`, strings.ToUpper(level))
	}
	return nil
}

func checkSchema(ctx context.Context, q *gen.Queries, database string) error {
	migrate := "apply it with `pgtask migrate` or runtime.Migrate"
	tables, err := q.SchemaTables(ctx)
	if err != nil {
		return fmt.Errorf("look for the pgtask schema: %w", err)
	}
	if !tables.Migrations {
		return fmt.Errorf("%w: database %q has no pgtask schema; %s", ErrSchemaNotCurrent, database, migrate)
	}
	migrations, err := Migrations()
	if err != nil {
		return err
	}
	pending, err := pendingMigrations(ctx, q, migrations[1:])
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		m := pending[0]
		return fmt.Errorf("%w: database %q lacks migration %04d_%s; %s", ErrSchemaNotCurrent, database, m.Version, m.Name, migrate)
	}
	if !tables.FunctionFiles {
		return fmt.Errorf("%w: database %q has no record of pgtask's function files; %s", ErrSchemaNotCurrent, database, migrate)
	}
	files, err := schema.FunctionFiles()
	if err != nil {
		return err
	}
	stale, err := staleFunctionFiles(ctx, q, files)
	if err != nil {
		return err
	}
	if len(stale) > 0 {
		f := stale[0]
		return fmt.Errorf("%w: database %q runs functions/%s at revision %d, this worker needs %d; %s",
			ErrSchemaNotCurrent, database, f.Name, f.running, f.Revision, migrate)
	}
	return nil
}
