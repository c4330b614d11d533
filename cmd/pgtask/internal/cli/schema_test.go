package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/cmd/pgtask/internal/cli"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// An unset DATABASE_URL is named as unset, with how to set it.
func TestUnsetDatabaseURL(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	for _, args := range databaseCommands {
		code, _, errOut := run(t, args...)
		if code != 1 || !strings.Contains(errOut, "DATABASE_URL is not set") ||
			!strings.Contains(errOut, "set DATABASE_URL=postgres://USER@HOST:5432/DATABASE") || strings.Contains(errOut, `database ""`) {
			t.Errorf("pgtask %v: code %d, stderr %q; want 1 and DATABASE_URL unset, with how to set it", args, code, errOut)
		}
	}
}

// Every command but migrate, on a database pgtask's schema is not in,
// says so as a worker does, and how to fix it: not the error of the first
// query to meet a missing table.
func TestCommandsOnAnUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	url := pgtasktest.NewEmptyDatabase(t)
	for _, args := range databaseCommands[1:] {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var out, errOut strings.Builder
		code := cli.Run(ctx, withDB(url, args...), &out, &errOut)
		cancel()
		if code != 1 || !strings.Contains(errOut.String(), "has no pgtask schema; apply it with `pgtask migrate`") ||
			strings.Contains(errOut.String(), "SQLSTATE") {
			t.Errorf("pgtask %v: code %d, stdout %q, stderr %q; want 1 and no pgtask schema", args, code, out.String(), errOut.String())
		}
	}
}

// A connection string that names no database is answered for the database
// the server picks, the user's, and the message names that one.
func TestUnnamedDatabaseIsNamed(t *testing.T) {
	t.Parallel()
	url := pgtasktest.NewEmptyDatabase(t)
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	// A role named as the database, so that the server picks it.
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	role := pgx.Identifier{cfg.Database}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.ConnectConfig(context.Background(), cfg)
		if err != nil {
			t.Errorf("drop role: %v", err)
			return
		}
		defer c.Close(context.Background())
		// The database goes after this cleanup; its sessions are gone by now.
		if _, err := c.Exec(context.Background(), "DROP ROLE "+role); err != nil {
			t.Errorf("drop role: %v", err)
		}
	})
	dsn := fmt.Sprintf("host=%s port=%d user=%s sslmode=disable", cfg.Host, cfg.Port, cfg.Database)
	code, _, errOut := run(t, "stats", "-database-url", dsn)
	if code != 1 || !strings.Contains(errOut, `database "`+cfg.Database+`" has no pgtask schema`) {
		t.Fatalf("stats on %q: code %d, stderr %q; want 1 and the database named", dsn, code, errOut)
	}
}
