package pgtasktest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest/internal/harnessdb"
	"github.com/pgtask/pgtask/schema"
)

// templateLock serialises building the template database across test
// processes (several packages' tests run at once). Creating a test database
// from the template holds it shared, so nobody is connected to the template
// while it is copied.
const templateLock int64 = 0x7067_7461_736b_0001 // "pgtask" + 1

var shared struct {
	once     sync.Once
	server   *Server
	template string
	err      error
}

// sharedServer finds the test server once per process.
func sharedServer(ctx context.Context) (*Server, string, error) {
	shared.once.Do(func() {
		shared.server, shared.err = Discover(ctx, DiscoverOptions{Logf: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, format+"\n", args...)
		}})
		if shared.err != nil {
			return
		}
		shared.template, shared.err = buildTemplate(ctx, shared.server.URL)
	})
	return shared.server, shared.template, shared.err
}

// templateName is derived from the migrations and function files, so a schema change gets a new
// template and an unchanged one is reused across runs.
func templateName() (string, error) {
	migrations, err := runtime.Migrations()
	if err != nil {
		return "", err
	}
	functions, err := schema.FunctionFiles()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, m := range migrations {
		fmt.Fprintf(h, "%d\x00%s\x00%s\x00", m.Version, m.Name, m.SQL)
	}
	for _, f := range functions {
		fmt.Fprintf(h, "%s\x00%s\x00", f.Name, f.SHA256)
	}
	return "pgtask_template_" + hex.EncodeToString(h.Sum(nil))[:12], nil
}

func buildTemplate(ctx context.Context, serverURL string) (string, error) {
	name, err := templateName()
	if err != nil {
		return "", err
	}
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", fmt.Errorf("connect to test server: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	q := harnessdb.New(admin)
	if err := q.AdvisoryLock(ctx, templateLock); err != nil {
		return "", fmt.Errorf("lock template: %w", err)
	}
	defer q.AdvisoryUnlock(context.WithoutCancel(ctx), templateLock) //nolint:errcheck // the session ends anyway

	exists, err := q.DatabaseExists(ctx, name)
	if err != nil {
		return "", fmt.Errorf("look for template: %w", err)
	}
	if !exists {
		if err := createDatabase(ctx, admin, name, ""); err != nil {
			return "", err
		}
	}
	// Migrate even an existing template: a run that died half-way leaves one
	// that is not migrated yet. Migrate is a no-op on a current schema.
	conn, err := pgx.Connect(ctx, withDatabase(serverURL, name))
	if err != nil {
		return "", fmt.Errorf("connect to template: %w", err)
	}
	_, err = runtime.Migrate(ctx, conn)
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	return name, nil
}

// NewDatabase creates a database with pgtask's schema for one test and drops
// it when the test ends, so tests run in parallel without seeing each other's
// jobs. It returns the database's URL. The server is found as Discover says;
// when none can be found the test fails with the reason.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, true)
}

// NewEmptyDatabase is NewDatabase without pgtask's schema, for testing
// migrations.
func NewEmptyDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, false)
}

func newDatabase(t testing.TB, migrated bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	server, template, err := sharedServer(ctx)
	if err != nil {
		t.Fatalf("pgtasktest: no database for tests: %v", err)
	}
	if !migrated {
		template = ""
	}
	dbURL, err := CreateDatabase(ctx, server.URL, template)
	if err != nil {
		t.Fatalf("pgtasktest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := DropDatabase(ctx, server.URL, dbURL); err != nil {
			t.Logf("pgtasktest: %v", err)
		}
	})
	return dbURL
}

// NewPool is NewDatabase plus a pool on it, closed when the test ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), NewDatabase(t))
	if err != nil {
		t.Fatalf("pgtasktest: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// CreateDatabase creates a uniquely named database on the server at
// serverURL, copied from template (empty: the server's default), and returns
// its URL.
func CreateDatabase(ctx context.Context, serverURL, template string) (string, error) {
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", fmt.Errorf("connect to test server: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	q := harnessdb.New(admin)
	if template != "" {
		if err := q.AdvisoryLockShared(ctx, templateLock); err != nil {
			return "", fmt.Errorf("lock template: %w", err)
		}
		defer q.AdvisoryUnlockShared(context.WithoutCancel(ctx), templateLock) //nolint:errcheck // the session ends anyway
	}
	var suffix [6]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return "", err
	}
	name := "pgtask_test_" + hex.EncodeToString(suffix[:])
	if err := createDatabase(ctx, admin, name, template); err != nil {
		return "", err
	}
	return withDatabase(serverURL, name), nil
}

// DropDatabase drops the database dbURL names, ending its sessions first.
func DropDatabase(ctx context.Context, serverURL, dbURL string) error {
	u, err := url.Parse(dbURL)
	if err != nil {
		return fmt.Errorf("drop database: %w", err)
	}
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("drop database: connect: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	name := pgx.Identifier{u.Path[1:]}.Sanitize()
	// Identifiers cannot be bound as parameters; the name is quoted by pgx.
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

func createDatabase(ctx context.Context, admin *pgx.Conn, name, template string) error {
	// Identifiers cannot be bound as parameters; both are quoted by pgx.
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		stmt += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if _, err := admin.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// withDatabase returns serverURL with its database replaced by name.
func withDatabase(serverURL, name string) string {
	u, err := url.Parse(serverURL)
	if err != nil || u.Scheme == "" {
		// A keyword/value connection string: a later dbname wins.
		return serverURL + " dbname=" + name
	}
	u.Path = "/" + name
	return u.String()
}
