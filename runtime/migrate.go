package runtime

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"

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
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			if e.Name() != "schema.go" {
				return nil, fmt.Errorf("migration file %q is not named NNNN_name.sql", e.Name())
			}
			continue
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

// Migrate brings the pgtask schema up to date and returns the versions it
// applied (none when it was current). It runs in one transaction under an
// advisory lock, so concurrent callers (several workers starting at once) are
// safe: the first applies, the others find nothing to do.
func Migrate(ctx context.Context, db Beginner) ([]int, error) {
	migrations, err := Migrations()
	if err != nil {
		return nil, err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit

	q := gen.New(tx)
	if err := q.LockMigrations(ctx); err != nil {
		return nil, fmt.Errorf("migrate: lock: %w", err)
	}
	done := map[int]bool{}
	var applied []int
	for _, m := range migrations {
		if m.Version == 0 {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return nil, fmt.Errorf("migrate: bootstrap: %w", err)
			}
			versions, err := q.AppliedMigrations(ctx)
			if err != nil {
				return nil, fmt.Errorf("migrate: read applied versions: %w", err)
			}
			for _, v := range versions {
				done[int(v)] = true
			}
			continue
		}
		if done[m.Version] {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return nil, fmt.Errorf("migrate: apply %04d_%s: %w", m.Version, m.Name, err)
		}
		if err := q.RecordMigration(ctx, gen.RecordMigrationParams{Version: int32(m.Version), Name: m.Name}); err != nil {
			return nil, fmt.Errorf("migrate: record %04d_%s: %w", m.Version, m.Name, err)
		}
		applied = append(applied, m.Version)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("migrate: commit: %w", err)
	}
	return applied, nil
}
