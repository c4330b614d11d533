package httptask_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/httptask"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// The example runs against a real PostgreSQL, found as the tests find one
// (see pgtasktest.Discover), in a database of its own.

var server *pgtasktest.Server

func TestMain(m *testing.M) {
	s, err := pgtasktest.Discover(context.Background(), pgtasktest.DiscoverOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "httptask tests: no database:", err)
		os.Exit(1)
	}
	server = s
	code := m.Run()
	s.Close()
	os.Exit(code)
}

// database creates a database with pgtask's schema and returns a pool on
// it, its pool configuration (for a worker) and a function that drops it.
func database() (*pgxpool.Pool, *pgxpool.Config, func()) {
	ctx := context.Background()
	url, err := pgtasktest.CreateDatabase(ctx, server.URL, "")
	check(err)
	cfg, err := pgxpool.ParseConfig(url)
	check(err)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	check(err)
	_, err = runtime.Migrate(ctx, pool)
	check(err)
	return pool, cfg, func() {
		pool.Close()
		check(pgtasktest.DropDatabase(ctx, server.URL, url))
	}
}

// check ends the example on an error it does not expect.
func check(err error) {
	if err != nil {
		panic(err)
	}
}

// A signed POST with a secret header, enqueued as a job and made by the
// handler Handle registers; the receiver checks the signature with Verify,
// and the job stores the answer.
func ExampleHandle() {
	key := []byte("32 random bytes from your vault.")
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		if err := httptask.Verify(r, key, 5*time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("received %s with Authorization %q\n", body, r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"accepted":true}`)
	}))
	defer receiver.Close()

	pool, poolConfig, drop := database()
	defer drop()
	ctx := context.Background()

	// HTTP calls wait on other services: lease mode runs many at once on
	// few connections.
	worker, err := runtime.NewWorker(ctx, poolConfig, runtime.Config{
		Queues: map[string]runtime.QueueConfig{"http": {Mode: runtime.ModeLease}},
		Logger: slog.New(slog.DiscardHandler),
	})
	check(err)
	defer worker.Close()
	check(httptask.Handle(worker, httptask.Config{
		Secrets:      httptask.StaticSecrets(map[string]string{"orders-token": "Bearer t0ken"}),
		SigningKey:   key,
		AllowPrivate: true, // the receiver listens on loopback
	}))

	req, err := httptask.Request{
		Method:        "POST",
		URL:           receiver.URL + "/orders",
		SecretHeaders: map[string]string{"Authorization": "orders-token"},
	}.WithJSON(map[string]int{"order": 42})
	check(err)
	id, err := httptask.EnqueueRequest(ctx, pool, req) // or in your transaction
	check(err)

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- worker.Run(runCtx) }()
	for {
		info, err := runtime.GetJob(ctx, pool, id)
		check(err)
		if info.Status.Finished() {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	check(<-done)

	resp, status, err := httptask.GetRequestResult(ctx, pool, id)
	check(err)
	fmt.Println(status, resp.Status, resp.Headers["Content-Type"], resp.Body)

	// Output:
	// received {"order":42} with Authorization "Bearer t0ken"
	// succeeded 200 application/json {"accepted":true}
}
