package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
	"github.com/pgtask/pgtask/schema"
)

// startError creates a worker on dbURL with cfg and returns NewWorker's
// error, failing the test if there is none or it took long.
func startError(t *testing.T, dbURL string, cfg runtime.Config) error {
	t.Helper()
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = testLogger(t)
	began := time.Now()
	w, err := runtime.NewWorker(context.Background(), pc, cfg)
	if err == nil {
		w.Close()
		t.Fatal("NewWorker succeeded, want an error")
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("NewWorker took %s to fail", took)
	}
	t.Logf("NewWorker: %v", err)
	return err
}

func wantErrorText(t *testing.T, err error, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}

// A worker that cannot work fails at start with one clear error, instead of
// starting and logging failures for as long as it runs.
func TestNewWorkerFailsWithoutADatabase(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(pgtasktest.NewEmptyDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/pgtask_no_such_database"
	err = startError(t, u.String(), runtime.Config{})
	wantErrorText(t, err, "new worker: connect to the database", "pgtask_no_such_database")
}

func TestNewWorkerFailsWithoutTheSchema(t *testing.T) {
	t.Parallel()
	err := startError(t, pgtasktest.NewEmptyDatabase(t), runtime.Config{})
	if !errors.Is(err, runtime.ErrSchemaNotCurrent) {
		t.Errorf("error %v is not ErrSchemaNotCurrent", err)
	}
	wantErrorText(t, err, "has no pgtask schema", "pgtask migrate")
}

func TestNewWorkerFailsOnAnOlderSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// The bootstrap only, without the baseline migration.
	pool := emptyPool(t)
	migrations, err := runtime.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, migrations[0].SQL); err != nil {
		t.Fatal(err)
	}
	err = startError(t, pool.Config().ConnString(), runtime.Config{})
	if !errors.Is(err, runtime.ErrSchemaNotCurrent) {
		t.Errorf("error %v is not ErrSchemaNotCurrent", err)
	}
	wantErrorText(t, err, "lacks migration 0001_baseline")

	// Every migration, but a function file the database does not run at
	// the revision the code needs (none at all).
	b := setup(t)
	files, err := schema.FunctionFiles()
	if err != nil {
		t.Fatal(err)
	}
	work := files[slices.IndexFunc(files, func(f schema.FunctionFile) bool { return f.Name == "work.sql" })]
	if err := b.q.ForgetFunctionFile(ctx, work.Name); err != nil {
		t.Fatal(err)
	}
	err = startError(t, b.url, runtime.Config{})
	if !errors.Is(err, runtime.ErrSchemaNotCurrent) {
		t.Errorf("error %v is not ErrSchemaNotCurrent", err)
	}
	wantErrorText(t, err, fmt.Sprintf("runs functions/work.sql at revision 0, this worker needs %d", work.Revision))
}

// A database migrated by a build from before the baseline records its own
// migration 1 under another name: its tables and functions are not this
// build's, so neither NewWorker nor Migrate takes it for current.
func TestADatabaseOfAnotherMigrationOneIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	if err := b.q.RenameMigration(ctx, testdb.RenameMigrationParams{Version: 1, Name: "jobs"}); err != nil {
		t.Fatal(err)
	}
	want := `the database records migration 0001 as "jobs", but this build's migration 0001 is "baseline"`
	err := startError(t, b.url, runtime.Config{})
	if !errors.Is(err, runtime.ErrSchemaNotCurrent) {
		t.Errorf("NewWorker: %v; want ErrSchemaNotCurrent", err)
	}
	wantErrorText(t, err, want, "recreate the database")
	report, err := runtime.Migrate(ctx, b.pool)
	if err == nil {
		t.Fatalf("Migrate: %v, <nil>; want an error saying %q", report, want)
	}
	wantErrorText(t, err, want)
}

// Concurrency the server cannot serve is refused before a single
// connection of the worker's is opened, so it never takes every
// connection of the server.
func TestNewWorkerRefusesConcurrencyTheServerCannotServe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	capacity, err := b.gen.ConnectionCapacity(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	err = startError(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{
		"default": {Concurrency: int(capacity.MaxConnections)},
	}})
	if !errors.Is(err, runtime.ErrNotEnoughConnections) {
		t.Errorf("error %v is not ErrNotEnoughConnections", err)
	}
	wantErrorText(t, err, "lower Config.MaxConns", "max_connections")
}

// Connections open now count against the default check, but not against
// CheckMax (a rolling deploy's old workers about to go), which still refuses
// what max_connections could never serve; CheckNone (behind a pooler)
// checks nothing. No worker here runs: NewWorker opens no connection of its
// pool.
func TestConnectionCheckChoosesWhatCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Another session, open for the whole test.
	other, err := pgx.Connect(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx) //nolint:errcheck // read-only session
	c, err := b.gen.ConnectionCapacity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	margin := max(3, int(c.MaxConnections)/10)
	// Fits max_connections with its margin exactly, with nothing else open.
	fits := int(c.MaxConnections-c.Reserved) - margin - 2
	queues := func(concurrency int) map[string]runtime.QueueConfig {
		return map[string]runtime.QueueConfig{"default": {Concurrency: concurrency}}
	}
	err = startError(t, b.url, runtime.Config{Queues: queues(fits)})
	if !errors.Is(err, runtime.ErrNotEnoughConnections) {
		t.Fatalf("default check with other sessions open: %v, want ErrNotEnoughConnections", err)
	}
	wantErrorText(t, err, "CheckMax")
	for _, check := range []runtime.ConnectionCheck{runtime.CheckMax, runtime.CheckNone} {
		pc, err := pgxpool.ParseConfig(b.url)
		if err != nil {
			t.Fatal(err)
		}
		w, err := runtime.NewWorker(ctx, pc, runtime.Config{Queues: queues(fits), ConnectionCheck: check, Logger: testLogger(t)})
		if err != nil {
			t.Fatalf("%q check, %d connections: %v", check, fits+2, err)
		}
		w.Close()
	}
	err = startError(t, b.url, runtime.Config{Queues: queues(fits + 1), ConnectionCheck: runtime.CheckMax})
	if !errors.Is(err, runtime.ErrNotEnoughConnections) {
		t.Fatalf("CheckMax past max_connections: %v, want ErrNotEnoughConnections", err)
	}
	wantErrorText(t, err, "raise max_connections")
	pc, err := pgxpool.ParseConfig(b.url)
	if err != nil {
		t.Fatal(err)
	}
	w, err := runtime.NewWorker(ctx, pc, runtime.Config{Queues: queues(10 * int(c.MaxConnections)), ConnectionCheck: runtime.CheckNone, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("CheckNone: %v", err)
	}
	w.Close()
	if err := startError(t, b.url, runtime.Config{ConnectionCheck: "sometimes"}); err == nil || !strings.Contains(err.Error(), "CheckFree") {
		t.Fatalf("an unknown check: %v", err)
	}
}

// Names the database could not store are refused where they are given: a
// queue name at NewWorker, a kind at Register.
func TestWorkerRefusesNamesTooLongToStore(t *testing.T) {
	t.Parallel()
	url := pgtasktest.NewDatabase(t)
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("q", runtime.MaxQueueBytes+1)
	_, err = runtime.NewWorker(context.Background(), pc, runtime.Config{Queues: map[string]runtime.QueueConfig{long: {}}})
	if err == nil || !strings.Contains(err.Error(), "queue is 129 bytes") {
		t.Errorf("NewWorker with a %d-byte queue: %v", len(long), err)
	}
	w, err := runtime.NewWorker(context.Background(), pc, runtime.Config{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = w.Register(runtime.Registration{Kind: strings.Repeat("k", runtime.MaxKindBytes+1), Handler: func(context.Context, *runtime.Job) error { return nil }})
	if err == nil || !strings.Contains(err.Error(), "kind is 129 bytes") {
		t.Errorf("Register with a long kind: %v", err)
	}
}

// A worker can run on the application's pool: its jobs run there, on no
// more connections than the pool allows, and closing the worker leaves the
// pool to the application.
func TestWorkerOnTheApplicationsPool(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(b.url)
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	w, err := runtime.NewWorkerFromPool(ctx, pool, runtime.Config{
		Logger: testLogger(t),
		Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 2}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var peak atomic.Int32
	if err := w.Register(runtime.Registration{Kind: "app", Handler: func(ctx context.Context, job *runtime.Job) error {
		peak.Store(max(peak.Load(), pool.Stat().AcquiredConns()))
		level, err := testdb.New(job.Tx()).TransactionIsolation(ctx)
		if err == nil && level != "read committed" {
			err = fmt.Errorf("job transaction at %s", level)
		}
		return err
	}}); err != nil {
		t.Fatal(err)
	}
	var ids []runtime.JobID
	for range 20 {
		ids = append(ids, enqueue(t, pool, "app", map[string]int{}))
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	for _, id := range ids {
		b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("the application's pool after the worker closed: %v", err)
	}
	if p := peak.Load(); p > 4 {
		t.Fatalf("%d of the pool's connections in use at once, want at most Concurrency + 2 (the listener's and maintenance's)", p)
	}
}

// A pool that cannot serve the worker is refused at start, with what to change.
func TestWorkerOnTheApplicationsPoolChecksIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	newPool := func(maxConns int32, isolation string) *pgxpool.Pool {
		pc, err := pgxpool.ParseConfig(b.url)
		if err != nil {
			t.Fatal(err)
		}
		pc.MaxConns = maxConns
		if isolation != "" {
			pc.ConnConfig.RuntimeParams["default_transaction_isolation"] = isolation
		}
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	_, err := runtime.NewWorkerFromPool(ctx, newPool(2, ""), runtime.Config{})
	if !errors.Is(err, runtime.ErrNotEnoughConnections) {
		t.Fatalf("a held-mode queue on a pool of 2: %v, want ErrNotEnoughConnections", err)
	}
	wantErrorText(t, err, "the pool's MaxConns is 2", "needs at least 3")
	_, err = runtime.NewWorkerFromPool(ctx, newPool(4, ""), runtime.Config{MaxConns: 8})
	if err == nil {
		t.Fatal("a Config.MaxConns other than the pool's was accepted")
	}
	wantErrorText(t, err, "Config.MaxConns is 8", "the pool's MaxConns, 4")
	_, err = runtime.NewWorkerFromPool(ctx, newPool(20, "repeatable read"), runtime.Config{})
	if err == nil {
		t.Fatal("a pool defaulting to REPEATABLE READ was accepted")
	}
	wantErrorText(t, err, "REPEATABLE READ", "READ COMMITTED")
}
