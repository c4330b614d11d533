package pgtasktest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
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

// templateHoldClass is the class of the two-key advisory locks by which
// test processes hold the templates they use (see HoldTemplate).
const templateHoldClass int32 = 0x7067_7400 // "pgt" + 0

var shared struct {
	once     sync.Once
	server   *Server
	template string
	// keeper holds the template for as long as the process runs: the
	// server ends its session, and so the hold, when the process ends,
	// however it ends.
	keeper *pgx.Conn
	err    error
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
		shared.template, shared.keeper, shared.err = buildTemplate(ctx, shared.server.URL)
	})
	return shared.server, shared.template, shared.err
}

// templateName is derived from the migrations and function files, so a schema change gets a new
// template and an unchanged one is reused across runs.
//
// A template outlives the test process that built it: go test runs each
// package's tests in a process of its own, and they all copy one template
// instead of migrating a database each. Every process that uses a
// template holds it (HoldTemplate) until it ends; a process that builds
// one drops the templates of other schemas that no process holds. So the
// server keeps the template of each schema whose tests are running, and
// of the last one tested; a template of another schema goes when the
// next tests start.
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

// buildTemplate makes sure the template of this schema exists, migrated
// and marked a template, and drops the stale ones of other schemas. It
// returns the template's name and the connection that holds it.
func buildTemplate(ctx context.Context, serverURL string) (string, *pgx.Conn, error) {
	name, err := templateName()
	if err != nil {
		return "", nil, err
	}
	keeper, err := prepareTemplate(ctx, serverURL, name)
	if err != nil {
		return "", nil, err
	}
	return name, keeper, nil
}

// prepareTemplate is buildTemplate for the template name.
func prepareTemplate(ctx context.Context, serverURL, name string) (*pgx.Conn, error) {
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return nil, fmt.Errorf("connect to test server: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	q := harnessdb.New(admin)
	// Building, holding and dropping templates all happen under this
	// lock, so a template is held before another process may look for
	// stale ones.
	if err := q.AdvisoryLock(ctx, templateLock); err != nil {
		return nil, fmt.Errorf("lock template: %w", err)
	}
	defer q.AdvisoryUnlock(context.WithoutCancel(ctx), templateLock) //nolint:errcheck // the session ends anyway

	exists, err := q.DatabaseExists(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("look for template: %w", err)
	}
	if !exists {
		if err := createDatabase(ctx, admin, name, ""); err != nil {
			return nil, err
		}
	}
	// Marked, it is found as a template of test processes, to drop once
	// nobody holds it; a template of an earlier pgtasktest is marked once
	// it is used.
	if err := setTemplate(ctx, admin, name, true); err != nil {
		return nil, err
	}
	// Migrate even an existing template: a run that died half-way leaves one
	// that is not migrated yet. Migrate is a no-op on a current schema.
	conn, err := pgx.Connect(ctx, withDatabase(serverURL, name))
	if err != nil {
		return nil, fmt.Errorf("connect to template: %w", err)
	}
	_, err = runtime.Migrate(ctx, conn)
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("migrate template: %w", err)
	}
	keeper, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return nil, fmt.Errorf("connect to hold the template: %w", err)
	}
	if err := harnessdb.New(keeper).HoldTemplate(ctx, harnessdb.HoldTemplateParams{Class: templateHoldClass, Name: name}); err != nil {
		keeper.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("hold template: %w", err)
	}
	dropStaleTemplates(ctx, admin, name)
	return keeper, nil
}

// dropStaleTemplates drops the templates of test processes, but keep, that
// no process holds. A template it cannot drop (someone is connected to it)
// stays, to try again next time; it says why on stderr.
func dropStaleTemplates(ctx context.Context, admin *pgx.Conn, keep string) {
	q := harnessdb.New(admin)
	names, err := q.PgtaskTemplates(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtasktest: look for stale templates: %v\n", err)
		return
	}
	for _, name := range names {
		if name == keep {
			continue
		}
		lock := harnessdb.TryLockTemplateParams{Class: templateHoldClass, Name: name}
		free, err := q.TryLockTemplate(ctx, lock)
		if err != nil || !free {
			continue
		}
		if err := dropTemplate(ctx, admin, name); err != nil {
			fmt.Fprintf(os.Stderr, "pgtasktest: drop the stale template %s: %v\n", name, err)
		}
		q.UnlockTemplate(ctx, harnessdb.UnlockTemplateParams(lock)) //nolint:errcheck // the session ends soon anyway
	}
}

// dropTemplate drops the template name, or leaves it marked.
func dropTemplate(ctx context.Context, admin *pgx.Conn, name string) error {
	if err := setTemplate(ctx, admin, name, false); err != nil {
		return err
	}
	// Identifiers cannot be bound as parameters; the name is quoted by pgx.
	// Without FORCE: a session someone opened on it is theirs to end.
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
		return errors.Join(err, setTemplate(ctx, admin, name, true))
	}
	return nil
}

// setTemplate sets whether the database name is marked a template.
func setTemplate(ctx context.Context, admin *pgx.Conn, name string, template bool) error {
	// Identifiers cannot be bound as parameters; the name is quoted by pgx.
	stmt := "ALTER DATABASE " + pgx.Identifier{name}.Sanitize() + " IS_TEMPLATE " + strconv.FormatBool(template)
	if _, err := admin.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("mark database %s a template (%v): %w", name, template, err)
	}
	return nil
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
