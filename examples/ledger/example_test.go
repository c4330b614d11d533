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
// and returns a pool on it and its pool configuration, for workers.
func database() (*pgxpool.Pool, *pgxpool.Config) {
	ctx := context.Background()
	url, err := pgtasktest.CreateDatabase(ctx, server.URL, "")
	check(err)
	server.mu.Lock()
	server.databases = append(server.databases, url)
	server.mu.Unlock()
	cfg, err := pgxpool.ParseConfig(url)
	check(err)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	check(err)
	_, err = runtime.Migrate(ctx, pool)
	check(err)
	_, err = pool.Exec(ctx, ledger.Schema)
	check(err)
	return pool, cfg
}

// quiet keeps the workers' logs (a failed attempt is logged as a warning)
// out of the examples' output.
var quiet = slog.New(slog.DiscardHandler)

// waitFinished polls until every job is finished.
func waitFinished(pool *pgxpool.Pool, ids ...runtime.JobID) {
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range ids {
		for {
			info, err := runtime.GetJob(context.Background(), pool, id)
			check(err)
			if info.Status.Finished() {
				break
			}
			if time.Now().After(deadline) {
				panic(fmt.Sprintf("job %d is still %s", id, info.Status))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// check ends an example on an error it does not expect.
func check(err error) {
	if err != nil {
		panic(err)
	}
}
