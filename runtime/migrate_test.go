package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
	"github.com/pgtask/pgtask/schema"
)

func emptyPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), pgtasktest.NewEmptyDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Several processes starting at once all migrate: one applies, the others
// wait for it and find nothing to do; running it again changes nothing.
func TestMigrateConcurrentlyAndAgain(t *testing.T) {
	t.Parallel()
	pool := emptyPool(t)
	migrations, err := runtime.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	functions, err := schema.FunctionFiles()
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for _, m := range migrations[1:] {
		want = append(want, m.Version)
	}

	results := make([]*runtime.MigrateReport, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i], errs[i] = runtime.Migrate(context.Background(), pool) })
	}
	wg.Wait()
	appliedBy := 0
	for i := range results {
		if errs[i] != nil {
			t.Fatalf("migrator %d: %v", i, errs[i])
		}
		if results[i].Changed() {
			appliedBy++
			if !slices.Equal(results[i].Migrations, want) {
				t.Fatalf("applied migrations %v, want %v", results[i].Migrations, want)
			}
			if len(results[i].Functions) != len(functions) {
				t.Fatalf("applied function files %v, want all %d", results[i].Functions, len(functions))
			}
		}
	}
	if appliedBy != 1 {
		t.Fatalf("%d migrators applied migrations, want exactly 1: %v", appliedBy, results)
	}
	again, err := runtime.Migrate(context.Background(), pool)
	if err != nil || again.Changed() {
		t.Fatalf("second migration applied %v, %v; want nothing", again, err)
	}
}

// A newly migrated database checks every row against every constraint: the
// baseline adds none NOT VALID, which would let a row break it.
func TestMigratedConstraintsAreAllValid(t *testing.T) {
	t.Parallel()
	b := setup(t)
	unvalidated, err := b.q.UnvalidatedConstraints(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(unvalidated) > 0 {
		t.Fatalf("constraints not validated after migrating: %v", unvalidated)
	}
}

// A function file is applied only when its revision is higher than the one
// the database runs: an older worker starting during a rolling deploy leaves
// the newer bodies in place.
func TestFunctionFilesOnlyMoveForward(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	files, err := schema.FunctionFiles()
	if err != nil {
		t.Fatal(err)
	}
	newer := files[0]
	newer.Revision++

	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := runtime.ApplyFunctionFiles(ctx, tx, []schema.FunctionFile{newer})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if want := []runtime.FunctionFileRevision{{Name: newer.Name, Revision: newer.Revision}}; !slices.Equal(got, want) {
		t.Fatalf("applied %v, want %v", got, want)
	}

	report, err := runtime.Migrate(ctx, b.pool)
	if err != nil {
		t.Fatal(err)
	}
	if report.Changed() {
		t.Fatalf("migrating with the older files changed %+v, want nothing", report)
	}
	applied, err := b.gen.AppliedFunctionFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range applied {
		if a.Name == newer.Name && int(a.Revision) != newer.Revision {
			t.Fatalf("%s runs revision %d, want %d", a.Name, a.Revision, newer.Revision)
		}
	}
}

// A database with jobs in it is brought up to date by a later release: the
// migration it appends after the baseline and the function files whose
// revisions rose are applied, once, and its jobs are worked by the current
// code.
func TestMigrateAppliesALaterMigrationToADatabaseWithJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	first := enqueue(t, b.pool, "work", map[string]int{"n": 1}, runtime.WithGroup("g"))
	second := enqueue(t, b.pool, "work", map[string]int{"n": 2}, runtime.WithGroup("g"))

	migrations, later := laterMigrations(t)
	files, err := schema.FunctionFiles()
	if err != nil {
		t.Fatal(err)
	}
	var raised []runtime.FunctionFileRevision
	for i := range files {
		files[i].Revision++
		raised = append(raised, runtime.FunctionFileRevision{Name: files[i].Name, Revision: files[i].Revision})
	}
	report, err := runtime.MigrateWith(ctx, b.pool, migrations, files)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(report.Migrations, []int{later.Version}) || !slices.Equal(report.Functions, raised) {
		t.Fatalf("migrated %+v, want migration %d and every function file at its raised revision", report, later.Version)
	}
	again, err := runtime.MigrateWith(ctx, b.pool, migrations, files)
	if err != nil || again.Changed() {
		t.Fatalf("second migration applied %v, %v; want nothing", again, err)
	}

	var ran []runtime.JobID
	var mu sync.Mutex
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "work", Handler: func(ctx context.Context, job *runtime.Job) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, job.ID)
		return nil
	}})
	b.waitStatus(t, second, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(ran, []runtime.JobID{first, second}) {
		t.Fatalf("ran %v, want %v in order", ran, []runtime.JobID{first, second})
	}
}

// laterMigrations returns pgtask's migrations followed by one that a later
// release might append (schema/testdata/later_migration.sql), and that one.
// Like most, it takes an exclusive lock on pgtask.jobs.
func laterMigrations(t *testing.T) ([]runtime.Migration, runtime.Migration) {
	t.Helper()
	migrations, err := runtime.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile("../schema/testdata/later_migration.sql")
	if err != nil {
		t.Fatal(err)
	}
	later := runtime.Migration{Version: migrations[len(migrations)-1].Version + 1, Name: "later", SQL: string(body)}
	return append(migrations, later), later
}

// A migration that needs a lock a long transaction holds waits for it only
// briefly at a time: the enqueues queued behind its lock request go on in
// between. It applies once the transaction ends.
func TestMigrationBehindALongTransactionLetsEnqueuesThrough(t *testing.T) {
	t.Parallel()
	pool := setup(t).pool
	migrations, _ := laterMigrations(t)
	functions, err := schema.FunctionFiles()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	blocker := holdJobsTable(t, pool)

	migrated := make(chan error, 1)
	go func() {
		_, err := runtime.MigrateWith(ctx, pool, migrations, functions)
		migrated <- err
	}()
	// Each of these waits behind the migration's lock request while it
	// lasts, then goes on.
	for i := range 3 {
		time.Sleep(700 * time.Millisecond)
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := runtime.Enqueue(ectx, pool, runtime.EnqueueRequest{Kind: "work", Payload: mustJSON(t, map[string]int{"n": i})})
		cancel()
		if err != nil {
			t.Fatalf("enqueue %d behind the migration: %v", i, err)
		}
	}
	select {
	case err := <-migrated:
		t.Fatalf("migration returned %v while the transaction held its lock", err)
	default:
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-migrated:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("migration still waiting 30s after the transaction ended")
	}
}

// A migration whose locks are never granted fails with an error that names
// the session holding them.
func TestMigrationThatCannotLockNamesTheHolder(t *testing.T) {
	t.Parallel()
	pool := setup(t).pool
	migrations, _ := laterMigrations(t)
	functions, err := schema.FunctionFiles()
	if err != nil {
		t.Fatal(err)
	}
	blocker := holdJobsTable(t, pool)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	_, err = runtime.MigrateWith(ctx, pool, migrations, functions)
	if !errors.Is(err, runtime.ErrMigrationLocked) {
		t.Fatalf("Migrate: %v, want ErrMigrationLocked", err)
	}
	pid := fmt.Sprintf("pid %d ", blocker.Conn().PgConn().PID())
	if !strings.Contains(err.Error(), pid) || !strings.Contains(err.Error(), "lock_timeout") {
		t.Fatalf("error %q names neither %q nor lock_timeout", err, pid)
	}
}

// holdJobsTable opens a transaction that has read pgtask.jobs, and so holds a
// lock on it that an ALTER TABLE waits for, until the test ends.
func holdJobsTable(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) }) //nolint:errcheck // may be over already
	if _, err := testdb.New(tx).CountJobs(ctx); err != nil {
		t.Fatal(err)
	}
	return tx
}
