package runtime_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// callbacks records the summaries that batch callbacks ran with, by batch.
type callbacks struct {
	mu   sync.Mutex
	runs map[runtime.BatchID][]runtime.BatchSummary
	bad  []error
}

func newCallbacks() *callbacks { return &callbacks{runs: map[runtime.BatchID][]runtime.BatchSummary{}} }

// registration is a callback kind's handler that records each run.
func (c *callbacks) registration(kind string) runtime.Registration {
	return runtime.Registration{Kind: kind, Handler: func(ctx context.Context, job *runtime.Job) error {
		s, err := runtime.BatchSummaryOf(job)
		c.mu.Lock()
		defer c.mu.Unlock()
		if err != nil {
			c.bad = append(c.bad, err)
			return nil
		}
		c.runs[s.BatchID] = append(c.runs[s.BatchID], s)
		return nil
	}}
}

func (c *callbacks) of(id runtime.BatchID) []runtime.BatchSummary {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]runtime.BatchSummary(nil), c.runs[id]...)
}

// waitRuns waits until each of ids had a callback run.
func (c *callbacks) waitRuns(t *testing.T, timeout time.Duration, ids ...runtime.BatchID) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		missing := 0
		c.mu.Lock()
		for _, id := range ids {
			if len(c.runs[id]) == 0 {
				missing++
			}
		}
		bad := c.bad
		c.mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("callbacks without a summary: %v", bad)
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d batches had no callback after %s", missing, len(ids), timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func noop(kind string) runtime.Registration {
	return runtime.Registration{Kind: kind, Handler: func(context.Context, *runtime.Job) error { return nil }}
}

func failing(kind string) runtime.Registration {
	return runtime.Registration{Kind: kind, Handler: func(context.Context, *runtime.Job) error {
		return runtime.NoRetry(errors.New("fails for good"))
	}}
}

func req(kind string, opts ...runtime.EnqueueOption) runtime.EnqueueRequest {
	r := runtime.EnqueueRequest{Kind: kind, Payload: []byte(`{}`)}
	r.Apply(opts...)
	return r
}

// A batch whose jobs succeed, fail for good and are cancelled, worked by
// three workers at once in each mode: its OnFinish callback runs once,
// with the counts, after every job finished; its OnFailure callback runs
// once too, and both stay single over many more maintenance rounds.
func TestBatchCallbackRunsOnceWithItsCounts(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			var reqs []runtime.EnqueueRequest
			for i := range 40 {
				switch {
				case i%10 == 3:
					reqs = append(reqs, req("bad"))
				case i%10 == 7:
					reqs = append(reqs, req("later", runtime.WithDelay(time.Hour)))
				default:
					reqs = append(reqs, req("ok"))
				}
			}
			done, failed := req("done"), req("failed")
			bid, ids, err := runtime.EnqueueBatch(ctx, b.pool, reqs, runtime.BatchOptions{OnFinish: &done, OnFailure: &failed})
			if err != nil {
				t.Fatal(err)
			}
			if len(ids) != len(reqs) {
				t.Fatalf("%d ids for %d jobs", len(ids), len(reqs))
			}
			cb := newCallbacks()
			cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: mode, Concurrency: 4}},
				MaintenanceInterval: 20 * time.Millisecond}
			for range 3 {
				startWorker(t, b.url, cfg, noop("ok"), failing("bad"), noop("later"), cb.registration("done"), cb.registration("failed"))
			}
			cb.waitRuns(t, 30*time.Second, bid)
			// The failure callback ran (and the batch is not over: the
			// delayed jobs wait).
			if got := cb.of(bid); len(got) != 1 || got[0].Finished || got[0].Failed < 1 || got[0].Total != 40 {
				t.Fatalf("before the end: %+v, want one failure callback", got)
			}
			bt, err := runtime.GetBatch(ctx, b.pool, bid)
			if err != nil {
				t.Fatal(err)
			}
			if bt.Finished() {
				t.Fatalf("batch ended with jobs still waiting: %+v", bt)
			}
			for i, id := range ids {
				if i%10 == 7 {
					if ok, err := runtime.CancelJob(ctx, b.pool, id); err != nil || !ok {
						t.Fatalf("cancel %d: %v %v", id, ok, err)
					}
				}
			}
			want := runtime.BatchSummary{BatchID: bid, Total: 40, Succeeded: 32, Failed: 4, Cancelled: 4, Finished: true}
			deadline := time.Now().Add(30 * time.Second)
			for len(cb.of(bid)) < 2 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond) // many more rounds of every worker
			got := cb.of(bid)
			if len(got) != 2 || got[1] != want {
				t.Fatalf("callbacks %+v, want the failure's, then %+v once", got, want)
			}
			bt, err = runtime.GetBatch(ctx, b.pool, bid)
			if err != nil {
				t.Fatal(err)
			}
			if !bt.Finished() || bt.FailedAt == nil || bt.Succeeded != 32 || bt.Failed != 4 || bt.Cancelled != 4 || bt.Deleted != 0 {
				t.Fatalf("batch %+v", bt)
			}
			for _, id := range []runtime.JobID{bt.OnFinish, bt.OnFailure} {
				if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusSucceeded || j.Attempts != 1 {
					t.Fatalf("callback %d: %s after %d attempts", id, j.Status, j.Attempts)
				}
			}
		})
	}
}

// Many small batches finish at once under four workers, in both modes,
// with maintenance rounds racing: each batch's callback runs exactly once.
func TestBatchCallbacksExactlyOnceUnderConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const batches, size = 60, 4
	var ids []runtime.BatchID
	for i := range batches {
		queue := "held"
		if i%2 == 1 {
			queue = "lease"
		}
		var reqs []runtime.EnqueueRequest
		for j := range size {
			kind := "ok"
			if j == 0 && i%3 == 0 {
				kind = "bad"
			}
			reqs = append(reqs, req(kind, runtime.WithQueue(queue)))
		}
		done := req("done", runtime.WithQueue(queue))
		id, _, err := runtime.EnqueueBatch(ctx, b.pool, reqs, runtime.BatchOptions{OnFinish: &done})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	cb := newCallbacks()
	cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{
		"held":  {Mode: runtime.ModeHeld, Concurrency: 4},
		"lease": {Mode: runtime.ModeLease, Concurrency: 4},
	}, MaintenanceInterval: 5 * time.Millisecond}
	for range 4 {
		startWorker(t, b.url, cfg, noop("ok"), failing("bad"), cb.registration("done"))
	}
	cb.waitRuns(t, 60*time.Second, ids...)
	time.Sleep(300 * time.Millisecond)
	for i, id := range ids {
		got := cb.of(id)
		failed := 0
		if i%3 == 0 {
			failed = 1
		}
		want := runtime.BatchSummary{BatchID: id, Total: size, Succeeded: size - failed, Failed: failed, Finished: true}
		if len(got) != 1 || got[0] != want {
			t.Errorf("batch %d: callbacks %+v, want %+v once", id, got, want)
		}
	}
	n, err := runtime.CountJobs(ctx, b.pool, runtime.JobFilter{Kind: "done"})
	if err != nil || n != batches {
		t.Fatalf("%d callback jobs (%v), want %d", n, err, batches)
	}
}

// Two maintenance sessions look at a finished batch at once: the one that
// locked it ends it and releases its callback; the other passes it over,
// and finds it ended once the first commits. A session that ends a batch and
// dies before it commits (as a killed worker's does) leaves it open, for
// the next round to end: once.
func TestBatchEndsOnceAcrossSessions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	bid, ids, err := runtime.EnqueueBatch(ctx, b.pool, []runtime.EnqueueRequest{req("later", runtime.WithDelay(time.Hour))},
		runtime.BatchOptions{OnFinish: ptr(req("done"))})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := runtime.CancelJob(ctx, b.pool, ids[0]); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	session := func() (*pgx.Conn, pgx.Tx) {
		t.Helper()
		c, err := pgx.Connect(ctx, b.url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) }) //nolint:errcheck // may be closed already
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return c, tx
	}
	finish := func(db gen.DBTX) gen.FinishBatchesRow {
		t.Helper()
		r, err := gen.New(db).FinishBatches(ctx, gen.FinishBatchesParams{After: 0, Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	bt, _ := runtime.GetBatch(ctx, b.pool, bid)
	parked := func() bool {
		j := b.job(t, bt.OnFinish)
		return j.Status == testdb.PgtaskJobStatusScheduled && j.RunAfter.Year() == 9999
	}

	// Dies before its commit.
	dying, tx := session()
	if r := finish(tx); r.Finished != 1 {
		t.Fatalf("the first session ended %d batches, want 1", r.Finished)
	}
	if err := dying.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !parked() {
		t.Fatal("a session that never committed released the callback")
	}

	_, txa := session()
	_, txb := session()
	if r := finish(txa); r.Finished != 1 {
		t.Fatalf("session a ended %d batches, want 1", r.Finished)
	}
	if r := finish(txb); r.Finished != 0 {
		t.Fatalf("session b, while a holds the batch: %+v, want it passed over", r)
	}
	if err := txa.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := finish(txb); r.Checked != 0 || r.Finished != 0 {
		t.Fatalf("session b, after a committed: %+v, want nothing open", r)
	}
	if err := txb.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if parked() {
		t.Fatal("the callback is still parked")
	}
	info, err := runtime.GetJob(ctx, b.pool, bt.OnFinish)
	if err != nil {
		t.Fatal(err)
	}
	s, err := runtime.BatchSummaryOf(&runtime.Job{ID: info.ID, Metadata: info.Metadata})
	if err != nil || s != (runtime.BatchSummary{BatchID: bid, Total: 1, Cancelled: 1, Finished: true}) {
		t.Fatalf("summary %+v, %v", s, err)
	}
}

func ptr[T any](v T) *T { return &v }

// A worker process is killed with SIGKILL while it runs a job of a batch:
// the job is rescued and run again elsewhere, and the batch's callback runs
// once, with the job counted once.
func TestBatchCallbackOnceAfterAWorkerIsKilled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	reqs := []runtime.EnqueueRequest{req("hang", runtime.WithQueue("crash"))}
	for range 5 {
		reqs = append(reqs, req("ok", runtime.WithQueue("crash")))
	}
	bid, ids, err := runtime.EnqueueBatch(ctx, b.pool, reqs, runtime.BatchOptions{OnFinish: ptr(req("done", runtime.WithQueue("cb")))})
	if err != nil {
		t.Fatal(err)
	}
	child := startWorkerProcess(t, b.url)
	b.waitStatus(t, ids[0], 30*time.Second, testdb.PgtaskJobStatusStarted)
	time.Sleep(200 * time.Millisecond)
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	child.Wait() //nolint:errcheck // killed on purpose

	cb := newCallbacks()
	cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{"crash": {Concurrency: 2}, "cb": {}}, MaintenanceInterval: 20 * time.Millisecond}
	for range 2 {
		startWorker(t, b.url, cfg, noop("hang"), noop("ok"), cb.registration("done"))
	}
	cb.waitRuns(t, 30*time.Second, bid)
	time.Sleep(300 * time.Millisecond)
	want := runtime.BatchSummary{BatchID: bid, Total: 6, Succeeded: 6, Finished: true}
	if got := cb.of(bid); len(got) != 1 || got[0] != want {
		t.Fatalf("callbacks %+v, want %+v once", got, want)
	}
	if j := b.job(t, ids[0]); j.Attempts != 2 {
		t.Fatalf("the killed job made %d attempts, want 2", j.Attempts)
	}
}

// A batch without a failure: its OnFailure callback never runs and is
// cancelled when the batch ends; OnFinish runs. A batch whose jobs all
// fail runs OnFailure once, not once per failure.
func TestBatchFailureCallbackOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	three := func(kind string) []runtime.EnqueueRequest {
		return []runtime.EnqueueRequest{req(kind), req(kind), req(kind)}
	}
	clean, _, err := runtime.EnqueueBatch(ctx, b.pool, three("ok"), runtime.BatchOptions{OnFinish: ptr(req("done")), OnFailure: ptr(req("failed"))})
	if err != nil {
		t.Fatal(err)
	}
	bad, _, err := runtime.EnqueueBatch(ctx, b.pool, three("bad"), runtime.BatchOptions{OnFailure: ptr(req("failed"))})
	if err != nil {
		t.Fatal(err)
	}
	finished, failures := newCallbacks(), newCallbacks()
	cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 3}}, MaintenanceInterval: 10 * time.Millisecond}
	for range 3 {
		startWorker(t, b.url, cfg, noop("ok"), failing("bad"), finished.registration("done"), failures.registration("failed"))
	}
	finished.waitRuns(t, 30*time.Second, clean)
	failures.waitRuns(t, 30*time.Second, bad)
	deadline := time.Now().Add(30 * time.Second)
	for {
		bt, err := runtime.GetBatch(ctx, b.pool, bad)
		if err != nil {
			t.Fatal(err)
		}
		if bt.Finished() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failing batch did not end: %+v", bt)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if got := failures.of(bad); len(got) != 1 || got[0].Failed < 1 || got[0].Finished {
		t.Fatalf("failure callbacks of the failing batch: %+v, want one", got)
	}
	if got := failures.of(clean); len(got) != 0 {
		t.Fatalf("failure callbacks of the clean batch: %+v", got)
	}
	bt, err := runtime.GetBatch(ctx, b.pool, clean)
	if err != nil {
		t.Fatal(err)
	}
	if j := b.job(t, bt.OnFailure); j.Status != testdb.PgtaskJobStatusCancelled {
		t.Fatalf("the clean batch's failure callback is %s, want cancelled", j.Status)
	}
}

// An operator retries a cancelled job of an open batch after the batch's
// cursor moved past it: the batch waits for it again, and ends only when
// it has finished. A batch's job deleted before it finished counts as
// deleted.
func TestBatchWaitsForARetriedJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	reqs := []runtime.EnqueueRequest{req("later", runtime.WithDelay(time.Hour)), req("later", runtime.WithDelay(time.Hour)), req("later", runtime.WithDelay(time.Hour))}
	bid, ids, err := runtime.EnqueueBatch(ctx, b.pool, reqs, runtime.BatchOptions{OnFinish: ptr(req("done"))})
	if err != nil {
		t.Fatal(err)
	}
	step := func() gen.FinishBatchesRow {
		t.Helper()
		r, err := b.gen.FinishBatches(ctx, gen.FinishBatchesParams{After: 0, Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	cancel := func(id runtime.JobID) {
		t.Helper()
		if ok, err := runtime.CancelJob(ctx, b.pool, id); err != nil || !ok {
			t.Fatalf("cancel %d: %v %v", id, ok, err)
		}
	}
	cancel(ids[0])
	if r := step(); r.Finished != 0 {
		t.Fatal("ended with jobs waiting")
	}
	// The cursor is past ids[0] now.
	if ok, err := runtime.RetryJob(ctx, b.pool, ids[0]); err != nil || !ok {
		t.Fatalf("retry: %v %v", ok, err)
	}
	cancel(ids[1])
	if _, err := b.q.DeleteJob(ctx, int64(ids[2])); err != nil {
		t.Fatal(err)
	}
	if r := step(); r.Finished != 0 {
		bt, _ := runtime.GetBatch(ctx, b.pool, bid)
		t.Fatalf("the batch ended while its retried job %d is queued: %+v", ids[0], bt)
	}
	cancel(ids[0])
	if r := step(); r.Finished != 1 {
		t.Fatal("the batch did not end once all its jobs had")
	}
	bt, err := runtime.GetBatch(ctx, b.pool, bid)
	if err != nil {
		t.Fatal(err)
	}
	if !bt.Finished() || bt.Cancelled != 2 || bt.Deleted != 1 || bt.Total != 3 {
		t.Fatalf("batch %+v", bt)
	}
}

// Bad batches are refused before anything is sent, with an error that
// says what is wrong, and nothing is inserted.
func TestEnqueueBatchRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ok := []runtime.EnqueueRequest{req("ok")}
	for _, c := range []struct {
		name string
		reqs []runtime.EnqueueRequest
		opts runtime.BatchOptions
		want string
	}{
		{"empty", nil, runtime.BatchOptions{OnFinish: ptr(req("done"))}, "at least one job"},
		{"callback without kind", ok, runtime.BatchOptions{OnFinish: ptr(req(""))}, "(the batch's OnFinish callback): the callback's kind is empty"},
		{"grouped callback", ok, runtime.BatchOptions{OnFinish: ptr(req("done", runtime.WithGroup("g")))}, "cannot be grouped"},
		{"delayed callback", ok, runtime.BatchOptions{OnFailure: ptr(req("done", runtime.WithDelay(time.Minute)))}, "(the batch's OnFailure callback): a batch's callback cannot have RunAt or Delay"},
		{"unique callback", ok, runtime.BatchOptions{OnFinish: ptr(req("done", runtime.WithUniqueKey("k")))}, "cannot be unique"},
		{"reserved metadata", ok, runtime.BatchOptions{OnFinish: ptr(req("done", runtime.WithMetadata(runtime.BatchMetadataKey, "x")))}, runtime.BatchMetadataKey},
		{"unique job", []runtime.EnqueueRequest{req("ok"), req("ok", runtime.WithUniqueKey("k"))}, runtime.BatchOptions{}, "item 1 of the batch"},
		{"bad payload", []runtime.EnqueueRequest{req("ok"), {Kind: "ok", Payload: []byte(`1`)}}, runtime.BatchOptions{}, "payload must be a JSON object"},
	} {
		_, _, err := runtime.EnqueueBatch(ctx, b.pool, c.reqs, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	if n, err := runtime.CountJobs(ctx, b.pool, runtime.JobFilter{}); err != nil || n != 0 {
		t.Fatalf("%d jobs after refused batches (%v)", n, err)
	}
	if _, err := runtime.GetBatch(ctx, b.pool, 1); !errors.Is(err, runtime.ErrBatchNotFound) {
		t.Fatalf("GetBatch of none: %v", err)
	}
	if _, err := runtime.BatchSummaryOf(&runtime.Job{ID: 1}); !errors.Is(err, runtime.ErrNotBatchCallback) {
		t.Fatalf("BatchSummaryOf a plain job: %v", err)
	}
}

// A producer with own jobs only makes batches and reads its own, not
// another login's; create_batch, which runs as the owner, takes in no job
// but those the caller's transaction enqueued; a worker of the worker role
// ends the batch and runs its callback.
func TestProducerMakesAndReadsItsOwnBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := grantTestRoles(t, b, true)
	producer := poolAs(t, b, r.Producer)

	theirs, theirJobs, err := runtime.EnqueueBatch(ctx, b.pool, []runtime.EnqueueRequest{req("ok")}, runtime.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mine, _, err := runtime.EnqueueBatch(ctx, producer, []runtime.EnqueueRequest{req("ok"), req("ok")},
		runtime.BatchOptions{OnFinish: ptr(req("done"))})
	if err != nil {
		t.Fatalf("a producer's EnqueueBatch: %v", err)
	}
	if bt, err := runtime.GetBatch(ctx, producer, mine); err != nil || bt.Total != 2 || bt.Finished() {
		t.Fatalf("the producer reading its batch: %+v, %v", bt, err)
	}
	if _, err := runtime.GetBatch(ctx, producer, theirs); !errors.Is(err, runtime.ErrBatchNotFound) {
		t.Errorf("the producer reading a batch it did not make: %v, want ErrBatchNotFound", err)
	}
	// Calling create_batch with another's job: refused, and the job stays
	// in its own batch.
	if j := b.job(t, theirJobs[0]); !j.BatchID.Valid || j.BatchID.Int64 != int64(theirs) {
		t.Fatalf("their job's batch is %v, want %d", j.BatchID, theirs)
	}
	_, err = testdb.New(producer).CreateBatch(ctx, testdb.CreateBatchParams{Ids: []int64{int64(theirJobs[0])}, Existed: []bool{false}})
	if err == nil || !strings.Contains(err.Error(), "not one this transaction enqueued") {
		t.Fatalf("create_batch of another's job: %v", err)
	}

	cb := newCallbacks()
	startWorker(t, urlAs(t, b.url, r.Worker), runtime.Config{MaintenanceInterval: 20 * time.Millisecond}, noop("ok"), cb.registration("done"))
	cb.waitRuns(t, 30*time.Second, mine)
	if got := cb.of(mine); len(got) != 1 || got[0].Succeeded != 2 {
		t.Fatalf("callbacks %+v", got)
	}
}

// Retention deletes ended batches once the longest of the jobs' ages has
// passed since they ended, and keeps open batches and younger ones.
func TestRetentionDeletesEndedBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := idleWorker(t, b.url, runtime.Config{Retention: runtime.Retention{
		Succeeded: time.Hour, Failed: 2 * time.Hour, Cancelled: time.Hour, Interval: time.Hour,
	}})
	batchOf := func() (runtime.BatchID, runtime.JobID) {
		t.Helper()
		id, jobs, err := runtime.EnqueueBatch(ctx, b.pool, []runtime.EnqueueRequest{req("later", runtime.WithDelay(time.Hour))}, runtime.BatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return id, jobs[0]
	}
	old, oldJob := batchOf()
	young, youngJob := batchOf()
	open, _ := batchOf()
	for _, j := range []runtime.JobID{oldJob, youngJob} {
		if ok, err := runtime.CancelJob(ctx, b.pool, j); err != nil || !ok {
			t.Fatalf("cancel: %v %v", ok, err)
		}
	}
	if r, err := b.gen.FinishBatches(ctx, gen.FinishBatchesParams{After: 0, Max: 10}); err != nil || r.Finished != 2 {
		t.Fatalf("ending the batches: %+v, %v", r, err)
	}
	for id, age := range map[runtime.BatchID]time.Duration{old: 3 * time.Hour, young: 90 * time.Minute} {
		if err := b.q.BackdateBatchFinished(ctx, testdb.BackdateBatchFinishedParams{ID: int64(id), AgeSeconds: age.Seconds()}); err != nil {
			t.Fatal(err)
		}
	}
	w.LeaderStep(ctx)
	if !w.IsLeader() {
		t.Fatal("the worker was not elected")
	}
	w.RetainStep(ctx)
	if _, err := runtime.GetBatch(ctx, b.pool, old); !errors.Is(err, runtime.ErrBatchNotFound) {
		t.Errorf("the batch ended 3h ago, past the longest age (2h): %v, want it deleted", err)
	}
	for _, id := range []runtime.BatchID{young, open} {
		if _, err := runtime.GetBatch(ctx, b.pool, id); err != nil {
			t.Errorf("batch %d: %v, want it kept", id, err)
		}
	}
}

// The check for a batch's end reads the batch's jobs from its cursor, which
// moves to the first unfinished job, so jobs that finished before it are
// not read again: after the first three of five jobs finished, the cursor
// is at the fourth, and stays there while it is unfinished, whatever
// finishes after it.
func TestBatchCursorMovesToTheFirstUnfinishedJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var reqs []runtime.EnqueueRequest
	for range 5 {
		reqs = append(reqs, req("later", runtime.WithDelay(time.Hour)))
	}
	bid, ids, err := runtime.EnqueueBatch(ctx, b.pool, reqs, runtime.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cursor := func() int64 {
		t.Helper()
		if _, err := b.gen.FinishBatches(ctx, gen.FinishBatchesParams{After: 0, Max: 10}); err != nil {
			t.Fatal(err)
		}
		row, err := b.q.GetBatchRow(ctx, int64(bid))
		if err != nil {
			t.Fatal(err)
		}
		return row.PendingFrom
	}
	if c := cursor(); c != int64(ids[0]) {
		t.Fatalf("cursor %d before anything finished, want the first job, %d", c, ids[0])
	}
	for _, i := range []int{0, 1, 2, 4} {
		if ok, err := runtime.CancelJob(ctx, b.pool, ids[i]); err != nil || !ok {
			t.Fatalf("cancel: %v %v", ok, err)
		}
	}
	if c := cursor(); c != int64(ids[3]) {
		t.Fatalf("cursor %d, want the first unfinished job, %d", c, ids[3])
	}
}

// A released callback ages like any job: its wait counts from its release,
// not from the far date it was parked with.
func TestReleasedCallbackAges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	bid, ids, err := runtime.EnqueueBatch(ctx, b.pool, []runtime.EnqueueRequest{req("later", runtime.WithDelay(time.Hour))},
		runtime.BatchOptions{OnFinish: ptr(req("done", runtime.WithPriority(5), runtime.WithAging(time.Millisecond)))})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := runtime.CancelJob(ctx, b.pool, ids[0]); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, err := b.gen.FinishBatches(ctx, gen.FinishBatchesParams{After: 0, Max: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.gen.PromoteScheduled(ctx, 10); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := b.gen.AgePriorities(ctx, 10); err != nil {
		t.Fatal(err)
	}
	bt, err := runtime.GetBatch(ctx, b.pool, bid)
	if err != nil {
		t.Fatal(err)
	}
	if j := b.job(t, bt.OnFinish); j.Status != testdb.PgtaskJobStatusQueued || j.Priority != 0 {
		t.Fatalf("released callback: %s, priority %d, age_due %v; want it queued and aged to 0", j.Status, j.Priority, j.AgeDue)
	}
}

// A parked callback whose row breaks a check added NOT VALID after it was
// stored cannot be released; its batch still ends, the other batches'
// callbacks are released, and the rest of maintenance goes on.
func TestAnUnwritableCallbackStopsNothingElse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	badBatch, badIDs, err := runtime.EnqueueBatch(ctx, b.pool, []runtime.EnqueueRequest{req("later", runtime.WithDelay(time.Hour))},
		runtime.BatchOptions{OnFinish: ptr(req("done"))})
	if err != nil {
		t.Fatal(err)
	}
	goodBatch, goodIDs, err := runtime.EnqueueBatch(ctx, b.pool, []runtime.EnqueueRequest{req("later", runtime.WithDelay(time.Hour))},
		runtime.BatchOptions{OnFinish: ptr(req("done"))})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := runtime.GetBatch(ctx, b.pool, badBatch)
	if err != nil {
		t.Fatal(err)
	}
	withoutQueueBound(t, b, func() {
		if err := b.q.SetJobQueue(ctx, testdb.SetJobQueueParams{ID: int64(bad.OnFinish), Queue: longQueue}); err != nil {
			t.Fatal(err)
		}
	})
	for _, id := range []runtime.JobID{badIDs[0], goodIDs[0]} {
		if ok, err := runtime.CancelJob(ctx, b.pool, id); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	if _, err := b.gen.FinishBatches(ctx, gen.FinishBatchesParams{After: 0, Max: 10}); err != nil {
		t.Fatalf("a round with an unwritable callback: %v", err)
	}
	for id, released := range map[runtime.BatchID]bool{badBatch: false, goodBatch: true} {
		bt, err := runtime.GetBatch(ctx, b.pool, id)
		if err != nil {
			t.Fatal(err)
		}
		j := b.job(t, bt.OnFinish)
		if bt.FinishedAt == nil || (j.RunAfter.Year() < 9999) != released {
			t.Errorf("batch %d: ended at %v, callback runs from %s; want it ended and its callback released: %v", id, bt.FinishedAt, j.RunAfter, released)
		}
	}
	// Maintenance goes on: a delayed job is promoted.
	late := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithDelay(time.Millisecond))
	startWorker(t, b.url, runtime.Config{MaintenanceInterval: 20 * time.Millisecond})
	b.waitStatus(t, late, 10*time.Second, testdb.PgtaskJobStatusQueued)
}
