package runtime_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// leaseConfig serves the default queue in lease mode, with the lease
// given, or the default for none.
func leaseConfig(concurrency int, lease ...time.Duration) runtime.Config {
	qc := runtime.QueueConfig{Mode: runtime.ModeLease, Concurrency: concurrency}
	if len(lease) > 0 {
		qc.Lease = lease[0]
	}
	return runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: qc}}
}

// A lease-mode worker hangs in a handler (as a SIGSTOPped process would)
// and its lease runs out: another worker takes the job over and runs it
// again. When the hung handler comes back, its success is refused and
// counted, its writes through Job.Tx roll back, and Extend says the lease
// is gone.
func TestLeaseTakeoverRefusesTheStaleOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	release := make(chan struct{})
	running := make(chan struct{}, 1)
	extended := make(chan error, 1)
	hung := runtime.Registration{Kind: "hangs", Handler: func(ctx context.Context, job *runtime.Job) error {
		if job.Attempt > 1 {
			return job.SetResult("second attempt")
		}
		running <- struct{}{}
		<-release
		extended <- job.Extend(ctx, time.Hour)
		if _, err := runtime.Enqueue(ctx, job.Tx(), runtime.EnqueueRequest{Kind: "marker", Payload: []byte(`{}`)}); err != nil {
			return err
		}
		return job.SetResult("stale attempt")
	}}
	marker := runtime.Registration{Kind: "marker", Handler: func(context.Context, *runtime.Job) error { return nil }}

	cfg := leaseConfig(4, time.Hour) // only the test makes the lease run out
	startWorker(t, b.url, cfg, hung, marker)
	id := enqueue(t, b.pool, "hangs", map[string]int{})
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not start")
	}
	if n, err := b.q.ExpireLease(ctx, int64(id)); err != nil || n != 1 {
		t.Fatalf("expire the lease: %d rows, %v", n, err)
	}
	// Another worker's maintenance takes it over and runs it again.
	startWorker(t, b.url, cfg, hung, marker)
	j := b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	if e := errorsOf(t, j); j.Attempts != 2 || len(e) != 1 || !strings.Contains(e[0].Error, "lease expired") {
		t.Fatalf("attempts=%d errors=%s", j.Attempts, j.Errors)
	}

	close(release)
	if err := <-extended; !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("Extend after the takeover: %v, want ErrLeaseLost", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		j = b.job(t, id)
		if j.StaleOutcomes > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stale attempt's outcome was not counted as refused")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if string(j.Result) != `"second attempt"` || j.Attempts != 2 || j.StaleOutcomes != 1 {
		t.Fatalf("after the stale outcome: result %s, attempts %d, refused %d", j.Result, j.Attempts, j.StaleOutcomes)
	}
	jobs, err := b.q.ListJobs(ctx, runtime.DefaultQueue)
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range jobs {
		if other.Kind == "marker" {
			t.Fatalf("the stale attempt's write through Job.Tx committed: job %d", other.ID)
		}
	}
}

// In lease mode Job.Tx begins on first use; a success commits with the
// handler's writes, a failure rolls them back.
func TestLeaseJobTxCommitsWithTheOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	write := func(fail bool) runtime.Handler {
		return func(ctx context.Context, job *runtime.Job) error {
			if _, err := runtime.Enqueue(ctx, job.Tx(), runtime.EnqueueRequest{Kind: "marker", Payload: []byte(`{}`)}); err != nil {
				return err
			}
			if fail {
				return runtime.NoRetry(errors.New("fails after writing"))
			}
			return job.SetResult("wrote")
		}
	}
	startWorker(t, b.url, leaseConfig(4),
		runtime.Registration{Kind: "writes", Handler: write(false)},
		runtime.Registration{Kind: "writes-then-fails", Handler: write(true)},
		runtime.Registration{Kind: "marker", Handler: func(context.Context, *runtime.Job) error { return nil }})
	ok := enqueue(t, b.pool, "writes", map[string]int{}, runtime.WithGroup("g"))
	bad := enqueue(t, b.pool, "writes-then-fails", map[string]int{})
	if j := b.waitStatus(t, ok, 10*time.Second, testdb.PgtaskJobStatusSucceeded); string(j.Result) != `"wrote"` {
		t.Fatalf("result %s", j.Result)
	}
	b.waitStatus(t, bad, 10*time.Second, testdb.PgtaskJobStatusFailed)
	waitGroupGone(t, b, runtime.DefaultQueue, "g")
	var markers int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		jobs, err := b.q.ListJobs(ctx, runtime.DefaultQueue)
		if err != nil {
			t.Fatal(err)
		}
		markers = 0
		for _, j := range jobs {
			if j.Kind == "marker" {
				markers++
			}
		}
		if markers > 0 || time.Now().After(deadline) {
			break
		}
	}
	if markers != 1 {
		t.Fatalf("%d marker jobs, want the succeeded job's one only", markers)
	}
}

// Lease-mode handlers hold no connection: many more run at once than the
// worker's pool has connections.
func TestLeaseConcurrencyIsNotBoundByThePool(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const jobs, concurrency = 600, 300
	var active, peak atomic.Int32
	w := startWorker(t, b.url, leaseConfig(concurrency), runtime.Registration{Kind: "io", Handler: func(ctx context.Context, job *runtime.Job) error {
		n := active.Add(1)
		defer active.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
		return nil
	}})
	reqs := make([]runtime.EnqueueRequest, jobs)
	for i := range reqs {
		reqs[i] = runtime.EnqueueRequest{Kind: "io", Payload: []byte(`{}`)}
	}
	if _, err := runtime.EnqueueMany(context.Background(), b.pool, reqs); err != nil {
		t.Fatal(err)
	}
	done := b.waitQueueDone(t, runtime.DefaultQueue, 30*time.Second)
	for _, j := range done {
		if j.Status != testdb.PgtaskJobStatusSucceeded {
			t.Fatalf("job %d is %s: %s", j.ID, j.Status, j.Errors)
		}
	}
	conns := w.Pool().Stat().MaxConns()
	if p := peak.Load(); p < concurrency/2 || int32(conns) > 4 {
		t.Fatalf("%d handlers at once on a pool of %d connections; want at least %d on at most 4", p, conns, concurrency/2)
	}
	t.Logf("%d handlers at once on a pool of %d connections", peak.Load(), conns)
}

// A queue whose mode is not configured takes the mode its kinds ask for
// (generated handlers set it from the task tag's mode option); a kind that
// asks for another mode than its queue's configured one is refused by
// Register.
func TestQueueModeFollowsItsKinds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{
		Kind: "leased", Queue: runtime.DefaultQueue, Mode: runtime.ModeLease,
		Handler: func(context.Context, *runtime.Job) error { return nil },
	})
	id := enqueue(t, b.pool, "leased", map[string]int{})
	if j := b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded); j.LeaseUntil == nil {
		t.Fatal("the job ran without a lease: the queue was not served in lease mode")
	}

	pc, err := pgxpool.ParseConfig(b.url)
	if err != nil {
		t.Fatal(err)
	}
	w, err := runtime.NewWorker(context.Background(), pc, runtime.Config{
		Logger: testLogger(t),
		Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: runtime.ModeHeld}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = w.Register(runtime.Registration{Kind: "leased", Queue: runtime.DefaultQueue, Mode: runtime.ModeLease,
		Handler: func(context.Context, *runtime.Job) error { return nil }})
	if err == nil || !strings.Contains(err.Error(), "kind leased needs mode lease, but queue default runs in mode held") {
		t.Fatalf("Register: %v", err)
	}
}

// A lease-mode claim takes a group's head and the jobs right behind it, and
// runs them one at a time in order. A failure that will be retried stops
// the run: the jobs behind it are handed back with their attempts
// returned, and run after the retry.
func TestLeaseRunsAGroupInOrderAndHandsBackBehindARetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 8
	ids := enqueueGroup(t, b, runtime.DefaultQueue, "g0", n)
	log := newStartLog()
	handler := log.logged(func(job *runtime.Job, p seqPayload) error {
		if p.Seq == 3 && job.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	})
	startWorker(t, b.url, leaseConfig(20), runtime.Registration{Kind: "seq", Handler: handler, Backoff: fastRetry})
	for _, j := range b.waitQueueDone(t, runtime.DefaultQueue, 30*time.Second) {
		if j.Status != testdb.PgtaskJobStatusSucceeded {
			t.Fatalf("job %d is %s: %s", j.ID, j.Status, j.Errors)
		}
	}
	log.checkOrder(t, 1, n)
	if got := log.starts["g0"]; len(got) != n+1 || got[3] != 3 || got[4] != 3 {
		t.Fatalf("starts %v, want each seq once and 3 twice, in order", got)
	}
	first := b.job(t, ids[0])
	for i, id := range ids {
		j := b.job(t, id)
		want := int32(1)
		if i == 3 {
			want = 2
		}
		if j.Attempts != want {
			t.Errorf("seq %d: %d attempts, want %d (a job handed back unstarted gets its attempt back)", i, j.Attempts, want)
		}
		if i < 3 && j.ClaimToken != first.ClaimToken {
			t.Errorf("seq %d was claimed apart from its head (token %v, head's %v): no run", i, j.ClaimToken, first.ClaimToken)
		}
	}
}

// At shutdown a lease-mode run starts nothing more: the jobs behind the
// one running are handed back, queued with their attempts returned, and
// the next worker runs them in order.
func TestLeaseRunHandsBackWhatItDidNotStartAtShutdown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 4
	ids := enqueueGroup(t, b, runtime.DefaultQueue, "g0", n)
	release := make(chan struct{})
	running := make(chan struct{}, 1)
	var ran []int
	var mu sync.Mutex
	handler := func(ctx context.Context, job *runtime.Job) error {
		p, err := runtime.DecodePayload[seqPayload](job)
		if err != nil {
			return err
		}
		mu.Lock()
		ran = append(ran, p.Seq)
		mu.Unlock()
		if p.Seq == 0 {
			running <- struct{}{}
			<-release
		}
		return nil
	}
	reg := runtime.Registration{Kind: "seq", Handler: handler}
	cfg := leaseConfig(20)
	cfg.ShutdownGrace = time.Minute
	_, stop := newWorker(t, b.url, cfg, reg)
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the group's head did not start")
	}
	for _, id := range ids[1:] {
		if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusStarted || j.Attempts != 1 {
			t.Fatalf("job %d behind the head: %s, %d attempts; want claimed with it", id, j.Status, j.Attempts)
		}
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	time.Sleep(300 * time.Millisecond) // shutdown has begun
	close(release)
	<-stopped
	if j := b.job(t, ids[0]); j.Status != testdb.PgtaskJobStatusSucceeded {
		t.Fatalf("the running head: %s, want succeeded", j.Status)
	}
	for _, id := range ids[1:] {
		j := b.job(t, id)
		if j.Status != testdb.PgtaskJobStatusQueued || j.Attempts != 0 || j.LeaseUntil != nil {
			t.Fatalf("job %d after shutdown: %s, %d attempts, lease %v; want queued, 0, none", id, j.Status, j.Attempts, j.LeaseUntil)
		}
	}
	startWorker(t, b.url, leaseConfig(20), reg)
	b.waitQueueDone(t, runtime.DefaultQueue, 30*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(ran, []int{0, 1, 2, 3}) {
		t.Fatalf("ran %v, want [0 1 2 3]", ran)
	}
}

// A job waiting in its run whose lease is taken over never starts there,
// and neither do the jobs behind it: they are handed back, and the group
// goes on in order from the job taken over.
func TestLeaseRunStopsAtAJobTakenOverWhileItWaited(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := enqueueGroup(t, b, runtime.DefaultQueue, "g0", 3)
	log := newStartLog()
	release := make(chan struct{})
	running := make(chan struct{}, 1)
	handler := log.logged(func(job *runtime.Job, p seqPayload) error {
		if p.Seq == 0 {
			running <- struct{}{}
			<-release
		}
		return nil
	})
	cfg := leaseConfig(20, 3*time.Second) // a heartbeat a second
	logs := &recordedLogs{}
	cfg.Logger = slog.New(logs)
	startWorker(t, b.url, cfg, runtime.Registration{Kind: "seq", Handler: handler})
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the group's head did not start")
	}
	// The job behind the head loses its lease as a hung worker's would, and
	// is taken over (by no worker of this test: -1), in one transaction so
	// that no heartbeat extends the lease in between.
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	if n, err := testdb.New(tx).ExpireLease(ctx, int64(ids[1])); err != nil || n != 1 {
		t.Fatalf("expire the lease of the job behind the head: %d rows, %v", n, err)
	}
	taken, err := gen.New(tx).ExpireLeases(ctx, gen.ExpireLeasesParams{Max: 10, WorkerID: -1})
	if err != nil || !slices.Equal(taken, []int64{int64(ids[1])}) {
		t.Fatalf("take over: %v, %v", taken, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Once the heartbeat has found the lease gone, the waiting job's own
	// lease time still has two thirds of a lease to run: only the takeover
	// keeps it from starting.
	deadline := time.Now().Add(10 * time.Second)
	for !logs.has("pgtask: a job's lease was lost while it waited in its run; it will not start here") {
		if time.Now().After(deadline) {
			t.Fatal("the heartbeat did not find the waiting job's lease lost")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	for _, j := range b.waitQueueDone(t, runtime.DefaultQueue, 30*time.Second) {
		if j.Status != testdb.PgtaskJobStatusSucceeded {
			t.Fatalf("job %d is %s: %s", j.ID, j.Status, j.Errors)
		}
	}
	log.mu.Lock()
	starts := slices.Clone(log.starts["g0"])
	log.mu.Unlock()
	if !slices.Equal(starts, []int{0, 1, 2}) {
		t.Fatalf("handlers started for seqs %v, want [0 1 2]: the job taken over must not start in its old run", starts)
	}
	if j := b.job(t, ids[1]); j.Attempts != 2 || !strings.Contains(string(j.Errors), "lease expired") {
		t.Fatalf("the job taken over: %d attempts, errors %s; want its lost attempt recorded and one more", j.Attempts, j.Errors)
	}
	if j := b.job(t, ids[2]); j.Attempts != 1 {
		t.Fatalf("the job behind it: %d attempts, want 1 (handed back, then run once)", j.Attempts)
	}
}

// claimFirstAttempt claims, as worker with a lease, the only job of the
// default queue, id, which must come at attempt 1.
func claimFirstAttempt(t *testing.T, q *gen.Queries, id runtime.JobID, worker int32, token int64) {
	t.Helper()
	rows, err := q.ClaimLeasedJobs(context.Background(), gen.ClaimLeasedJobsParams{
		Queue: runtime.DefaultQueue, Max: 1, WorkerID: worker, LeaseMs: 60_000, Token: token, RunMax: 10,
	})
	if err != nil || len(rows) != 1 || rows[0].ID != int64(id) || rows[0].Attempts != 1 {
		t.Fatalf("claim by worker %d: %+v, %v; want job %d at attempt 1", worker, rows, err, id)
	}
}

// A hand-back returns the attempt, so the attempt's number comes round
// again with the next claim. A hand-back sent again (its reply lost) after
// another worker claimed the job must leave that claim alone: it is fenced
// by the claim's token as well as the attempt.
func TestLeaseHandBackSentAgainLeavesTheNextClaimAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := enqueue(t, b.pool, "seq", seqPayload{Seq: 0})
	q := b.gen
	handBack := gen.HandBackParams{Ids: []int64{int64(id)}, Attempts: []int32{1}, Tokens: []int64{111}}
	claimFirstAttempt(t, q, id, 1, 111)
	if r, err := q.HandBack(ctx, handBack); err != nil || r.Released != 1 {
		t.Fatalf("hand back: %d rows, %v", r.Released, err)
	}
	claimFirstAttempt(t, q, id, 2, 222)
	if r, err := q.HandBack(ctx, handBack); err != nil || r.Released != 0 {
		t.Fatalf("the hand-back sent again: %d rows, %v; want none", r.Released, err)
	}
	if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusStarted || j.Attempts != 1 || j.WorkerID.Int32 != 2 {
		t.Fatalf("after the hand-back sent again: %s, %d attempts, worker %v; want worker 2's claim", j.Status, j.Attempts, j.WorkerID.Int32)
	}
}

// A heartbeat still carrying a job its worker handed back (the attempt
// returned, then claimed by another worker under the same number) must not
// extend the other worker's lease, which would put off its takeover.
func TestLeaseExtensionOfAHandedBackClaimLeavesTheNextAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := enqueue(t, b.pool, "seq", seqPayload{Seq: 0})
	q := b.gen
	extend := func(token int64) []int64 {
		t.Helper()
		kept, err := q.ExtendLeases(ctx, gen.ExtendLeasesParams{
			Ids: []int64{int64(id)}, Attempts: []int32{1}, Tokens: []int64{token}, LeaseMs: 3_600_000,
		})
		if err != nil {
			t.Fatalf("extend with token %d: %v", token, err)
		}
		return kept
	}
	claimFirstAttempt(t, q, id, 1, 111)
	if kept := extend(111); len(kept) != 1 {
		t.Fatalf("worker 1 extending its own claim kept %v; want job %d", kept, id)
	}
	if r, err := q.HandBack(ctx, gen.HandBackParams{Ids: []int64{int64(id)}, Attempts: []int32{1}, Tokens: []int64{111}}); err != nil || r.Released != 1 {
		t.Fatalf("hand back: %d rows, %v", r.Released, err)
	}
	claimFirstAttempt(t, q, id, 2, 222)
	before := b.job(t, id).LeaseUntil
	if kept := extend(111); len(kept) != 0 {
		t.Fatalf("worker 1's late heartbeat kept %v; want nothing", kept)
	}
	if after := b.job(t, id).LeaseUntil; after == nil || before == nil || !after.Equal(*before) {
		t.Fatalf("worker 2's lease moved from %v to %v on worker 1's late heartbeat", before, after)
	}
	if kept := extend(222); len(kept) != 1 {
		t.Fatalf("worker 2 extending its claim kept %v; want job %d", kept, id)
	}
}
