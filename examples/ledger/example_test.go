package ledger_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/examples/ledger"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// The examples run against a real PostgreSQL, found as the tests find one
// (see pgtasktest.Discover). Each works in a fresh database of its own,
// dropped when the package's tests end.

var server struct {
	*pgtasktest.Server
	mu        sync.Mutex
	databases []string
}

func TestMain(m *testing.M) {
	ctx := context.Background()
	s, err := pgtasktest.Discover(ctx, pgtasktest.DiscoverOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledger examples: no database:", err)
		os.Exit(1)
	}
	server.Server = s
	code := m.Run()
	for _, db := range server.databases {
		if err := pgtasktest.DropDatabase(ctx, s.URL, db); err != nil {
			fmt.Fprintln(os.Stderr, "ledger examples:", err)
		}
	}
	s.Close()
	os.Exit(code)
}

// database creates a database with pgtask's schema and the ledger's table,
// and returns a pool on it and its pool configuration, for workers. An
// example has no *testing.T: it ends on an error with a panic, which fails
// it.
func database() (*pgxpool.Pool, *pgxpool.Config) {
	pool, cfg, err := newDatabase()
	check(err)
	return pool, cfg
}

// testDatabase is database for a test: an error fails t, and the pool is
// closed when t ends.
func testDatabase(t *testing.T) (*pgxpool.Pool, *pgxpool.Config) {
	t.Helper()
	pool, cfg, err := newDatabase()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, cfg
}

func newDatabase() (*pgxpool.Pool, *pgxpool.Config, error) {
	ctx := context.Background()
	url, err := pgtasktest.CreateDatabase(ctx, server.URL, "")
	if err != nil {
		return nil, nil, err
	}
	server.mu.Lock()
	server.databases = append(server.databases, url)
	server.mu.Unlock()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if _, err := runtime.Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, err
	}
	if _, err := pool.Exec(ctx, ledger.Schema); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, cfg, nil
}

// quiet keeps the workers' logs (a failed attempt is logged as a warning)
// out of the examples' output.
var quiet = slog.New(slog.DiscardHandler)

// waitFinished polls until every job is finished; an example panics on a
// job that does not finish in time.
func waitFinished(pool *pgxpool.Pool, ids ...runtime.JobID) {
	check(waitJobs(pool, ids...))
}

// testWaitFinished is waitFinished for a test: a job that does not finish
// in time fails t.
func testWaitFinished(t *testing.T, pool *pgxpool.Pool, ids ...runtime.JobID) {
	t.Helper()
	if err := waitJobs(pool, ids...); err != nil {
		t.Fatal(err)
	}
}

func waitJobs(pool *pgxpool.Pool, ids ...runtime.JobID) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range ids {
		for {
			info, err := runtime.GetJob(context.Background(), pool, id)
			if err != nil {
				return err
			}
			if info.Status.Finished() {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("job %d is still %s", id, info.Status)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// check ends an example on an error it does not expect.
func check(err error) {
	if err != nil {
		panic(err)
	}
}
