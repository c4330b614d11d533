package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/gen"
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

// A database of the first release, with jobs in it, is brought up to date:
// the migrations after 0001 and every function file are applied, and its
// jobs are worked by the current code.
func TestMigrateFromFirstRelease(t *testing.T) {
	t.Parallel()
	pool, migrations := firstReleasePool(t)
	ctx := context.Background()
	first := enqueue(t, pool, "work", map[string]int{"n": 1}, runtime.WithGroup("g"))
	second := enqueue(t, pool, "work", map[string]int{"n": 2}, runtime.WithGroup("g"))

	report, err := runtime.Migrate(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for _, m := range migrations[2:] {
		want = append(want, m.Version)
	}
	files, err := schema.FunctionFiles()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(report.Migrations, want) || len(report.Functions) != len(files) {
		t.Fatalf("migrated %+v, want migrations %v and all %d function files", report, want, len(files))
	}

	var ran []runtime.JobID
	var mu sync.Mutex
	url := pool.Config().ConnString()
	startWorker(t, url, runtime.Config{}, runtime.Registration{Kind: "work", Handler: func(ctx context.Context, job *runtime.Job) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, job.ID)
		return nil
	}})
	b := newBundle(url, pool)
	b.waitStatus(t, second, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(ran, []runtime.JobID{first, second}) {
		t.Fatalf("ran %v, want %v in order", ran, []runtime.JobID{first, second})
	}
}

// Workers of the previous release claim through claim_jobs, kept beside
// claim_jobs_v2 for a rolling deploy: it returns the claimed rows as the
// claim left them (started, attempt counted), which those workers record
// their outcome by.
func TestPreviousReleaseClaimSeesItsClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for range 3 {
		enqueue(t, b.pool, "k", map[string]int{})
	}
	for _, max := range []int32{1, 2} {
		rows, err := b.q.ClaimJobsAsPreviousRelease(ctx, testdb.ClaimJobsAsPreviousReleaseParams{Queue: runtime.DefaultQueue, Max: max, WorkerID: 7})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != int(max) {
			t.Fatalf("claimed %d rows, want %d", len(rows), max)
		}
		for _, r := range rows {
			if r.Status != testdb.PgtaskJobStatusStarted || r.Attempts != 1 || !r.OwnerPid.Valid || r.WorkerID.Int32 != 7 {
				t.Fatalf("claimed row %d: status %s, attempts %d, owner %v, worker %v; want it as the claim left it",
					r.ID, r.Status, r.Attempts, r.OwnerPid, r.WorkerID)
			}
		}
	}
}

// firstReleasePool returns a pool on a database migrated as the first
// release left it (the bootstrap and 0001 only), and all the migrations.
func firstReleasePool(t *testing.T) (*pgxpool.Pool, []runtime.Migration) {
	t.Helper()
	pool := emptyPool(t)
	ctx := context.Background()
	migrations, err := runtime.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migrations[:2] {
		if _, err := pool.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("apply %04d: %v", m.Version, err)
		}
		if m.Version > 0 {
			if err := gen.New(pool).RecordMigration(ctx, gen.RecordMigrationParams{Version: int32(m.Version), Name: m.Name}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return pool, migrations
}

// A migration that needs a lock a long transaction holds waits for it only
// briefly at a time: the enqueues queued behind its lock request go on in
// between. It applies once the transaction ends.
func TestMigrationBehindALongTransactionLetsEnqueuesThrough(t *testing.T) {
	t.Parallel()
	pool, _ := firstReleasePool(t)
	ctx := context.Background()
	blocker := holdJobsTable(t, pool)

	migrated := make(chan error, 1)
	go func() {
		_, err := runtime.Migrate(ctx, pool)
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
	pool, _ := firstReleasePool(t)
	blocker := holdJobsTable(t, pool)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	_, err := runtime.Migrate(ctx, pool)
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
