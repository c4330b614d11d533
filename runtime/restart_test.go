package runtime_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// The database restarts while workers run: they reconnect, and every job
// still runs to success, groups in order. The restart happens on a cluster of
// the test's own, never the shared server.
func TestDatabaseRestartIsSurvived(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, b := restartableDatabase(t)
	url, pool := b.url, b.pool

	const groups, perGroup, ungrouped = 20, 15, 100
	var reqs []runtime.EnqueueRequest
	for s := range perGroup {
		for g := range groups {
			key := fmt.Sprintf("g%d", g)
			req := runtime.EnqueueRequest{Kind: "seq", Payload: mustJSON(t, seqPayload{Group: key, Seq: s})}
			req.Apply(runtime.WithGroup(key))
			reqs = append(reqs, req)
		}
	}
	for n := range ungrouped {
		reqs = append(reqs, runtime.EnqueueRequest{Kind: "seq", Payload: mustJSON(t, seqPayload{Seq: n})})
	}
	if _, err := runtime.EnqueueMany(ctx, pool, reqs); err != nil {
		t.Fatal(err)
	}

	log := newStartLog()
	startBatching(t, url, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 4, BatchSize: 3}}},
		runtime.Registration{Kind: "seq", Handler: func(ctx context.Context, job *runtime.Job) error {
			p, err := runtime.DecodePayload[seqPayload](job)
			if err != nil {
				return err
			}
			log.begin(p)
			defer log.end(p)
			time.Sleep(5 * time.Millisecond)
			return nil
		}})

	// Restart once about a third of the jobs are done.
	for deadline := time.Now().Add(60 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatal("a third of the jobs did not finish within 60s")
		}
		counts, err := b.q.CountJobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		done := int64(0)
		for _, c := range counts {
			if c.Status == testdb.PgtaskJobStatusSucceeded {
				done = c.Jobs
			}
		}
		if done > int64(len(reqs)/3) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cluster.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Log("database restarted")

	jobs := b.waitQueueDone(t, runtime.DefaultQueue, 90*time.Second)
	retried := 0
	for _, j := range jobs {
		if j.Status != testdb.PgtaskJobStatusSucceeded {
			t.Fatalf("job %d is %s: %s", j.ID, j.Status, j.Errors)
		}
		if j.Attempts > 1 {
			retried++
		}
	}
	if len(jobs) != len(reqs) {
		t.Fatalf("%d jobs, want %d", len(jobs), len(reqs))
	}
	log.checkOrder(t, groups, perGroup)
	t.Logf("%d jobs succeeded, %d of them needed another attempt after the restart", len(jobs), retried)
}

// In lease mode a job outlives a database restart: its handler runs on
// through it, and its success is recorded once the database is back, as
// the same attempt.
func TestLeasedJobOutlivesADatabaseRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, b := restartableDatabase(t)
	url, pool := b.url, b.pool
	running := make(chan struct{})
	restarted := make(chan struct{})
	startWorker(t, url, leaseConfig(4), runtime.Registration{Kind: "long", Handler: func(ctx context.Context, job *runtime.Job) error {
		close(running)
		select {
		case <-restarted:
		case <-ctx.Done():
			return ctx.Err()
		}
		return job.SetResult("done after the restart")
	}})
	id := enqueue(t, pool, "long", map[string]int{})
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not start")
	}
	if err := cluster.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	close(restarted)
	pool.Reset() // the test's own connections died with the server
	j := b.waitStatus(t, id, 30*time.Second, testdb.PgtaskJobStatusSucceeded)
	if j.Attempts != 1 || string(j.Result) != `"done after the restart"` || len(errorsOf(t, j)) != 0 {
		t.Fatalf("attempts=%d result=%s errors=%s; want the first attempt's success", j.Attempts, j.Result, j.Errors)
	}
}

// restartableDatabase starts a cluster of the test's own, which the test may
// restart, with pgtask's schema in its postgres database.
func restartableDatabase(t *testing.T) (*pgtasktest.Cluster, *bundle) {
	t.Helper()
	ctx := context.Background()
	cluster, err := pgtasktest.StartCluster(ctx, pgtasktest.ClusterOptions{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Close() }) //nolint:errcheck // best effort
	url := cluster.URL("postgres")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := runtime.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return cluster, newBundle(url, pool)
}
