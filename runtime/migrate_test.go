package runtime_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
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
	var want []int
	for _, m := range migrations[1:] {
		want = append(want, m.Version)
	}

	results := make([][]int, 4)
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
		if len(results[i]) > 0 {
			appliedBy++
			if !slices.Equal(results[i], want) {
				t.Fatalf("applied %v, want %v", results[i], want)
			}
		}
	}
	if appliedBy != 1 {
		t.Fatalf("%d migrators applied migrations, want exactly 1: %v", appliedBy, results)
	}
	again, err := runtime.Migrate(context.Background(), pool)
	if err != nil || len(again) != 0 {
		t.Fatalf("second migration applied %v, %v; want nothing", again, err)
	}
}
