package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// Held mode batches itself: a runner claims what the backlog offers, sized
// by how long its jobs take, runs them one after another in one
// transaction, and commits when the batch is done or its commit budget has
// run out. These tests race real workers over a real database.

// quick is a handler that does nothing.
func quick(context.Context, *runtime.Job) error { return nil }

// enqueueKinds enqueues one job of each kind, in order, in one statement,
// with payload {"n": i}.
func enqueueKinds(t *testing.T, b *bundle, kinds ...string) []runtime.JobID {
	t.Helper()
	reqs := make([]runtime.EnqueueRequest, len(kinds))
	for i, k := range kinds {
		reqs[i] = runtime.EnqueueRequest{Kind: k, Payload: mustJSON(t, map[string]int{"n": i})}
	}
	ids, err := runtime.EnqueueMany(context.Background(), b.pool, reqs)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// warmUp runs n jobs of kind on the worker already serving the default
// queue, so that its runners have seen how long the kind's jobs take.
func warmUp(t *testing.T, b *bundle, kind string, n int) {
	t.Helper()
	kinds := make([]string, n)
	for i := range kinds {
		kinds[i] = kind
	}
	enqueueKinds(t, b, kinds...)
	b.waitQueueDone(t, runtime.DefaultQueue, 60*time.Second)
}

// At the default Config, a backlog of short jobs shares commits: their
// successes are recorded by far fewer transactions than there are jobs.
func TestHeldBatchesShareCommitsByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 1000
	kinds := make([]string, n)
	for i := range kinds {
		kinds[i] = "quick"
	}
	enqueueKinds(t, b, kinds...)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "quick", Handler: quick})
	for _, j := range b.waitQueueDone(t, runtime.DefaultQueue, 60*time.Second) {
		if j.Status != testdb.PgtaskJobStatusSucceeded || j.Attempts != 1 {
			t.Fatalf("job %d is %s after %d attempts; want succeeded after 1", j.ID, j.Status, j.Attempts)
		}
	}
	commits, err := b.q.CountSuccessCommits(context.Background(), runtime.DefaultQueue)
	if err != nil {
		t.Fatal(err)
	}
	// A batch commits once its jobs have taken the commit budget in wall
	// time, and a loaded machine stretches that time: the round trips of
	// each job's savepoint wait for a core. Four quiet runs took 65 to 122
	// commits; under -race beside other test suites, 390 to 839. One commit
	// per job, as with no batching, would be 1,000.
	if commits > n*9/10 {
		t.Errorf("%d jobs took %d commits; want at most %d", n, commits, n*9/10)
	}
	t.Logf("%d jobs, %d commits", n, commits)
}

// A lone job on an idle queue commits as soon as it has run, however long
// the commit budget: a batch that is done commits.
func TestHeldBatchCommitsALoneJobAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	startWorker(t, b.url, runtime.Config{
		PollInterval: time.Minute,
		Queues:       map[string]runtime.QueueConfig{runtime.DefaultQueue: {CommitBudget: time.Hour}},
	}, runtime.Registration{Kind: "quick", Handler: quick})
	warmUp(t, b, "quick", 200)
	time.Sleep(100 * time.Millisecond) // idle
	id := enqueueKinds(t, b, "quick")[0]
	b.waitStatus(t, id, 5*time.Second, testdb.PgtaskJobStatusSucceeded)
}

// A slow handler does not hold back the commit of the successes before it
// in its batch: a kind the runner has not seen yet may be slow, so they
// commit before it starts.
func TestHeldSlowHandlerDoesNotHoldBackEarlierCommits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 1, BatchSize: 20}}},
		runtime.Registration{Kind: "quick", Handler: quick},
		runtime.Registration{Kind: "slow", Handler: func(ctx context.Context, job *runtime.Job) error {
			close(started)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}})
	warmUp(t, b, "quick", 100)
	ids := enqueueKinds(t, b, "quick", "quick", "quick", "quick", "quick", "slow")
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow job did not start")
	}
	for _, id := range ids[:5] {
		b.waitStatus(t, id, 5*time.Second, testdb.PgtaskJobStatusSucceeded)
	}
	if j := b.job(t, ids[5]); j.Status != testdb.PgtaskJobStatusStarted {
		t.Fatalf("the slow job is %s while its handler runs", j.Status)
	}
}

// A handler abandoned past its timeout ends its batch's session: the
// batch's other jobs are rolled back with it and run again, none lost, their
// writes committed once, and the attempts they did nothing wrong in are not
// counted; the abandoned job's is.
func TestHeldBatchAbandonedHandlerCountsTheOthersOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	defer close(release)
	var mu sync.Mutex
	runs := map[runtime.JobID]int{}
	blocker := runtime.JobID(-1)
	startBatching(t, b.url, runtime.Config{
		AbandonGrace: 100 * time.Millisecond,
		Queues:       map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 1, BatchSize: 20}},
	}, runtime.Registration{Kind: "moody", Timeout: 300 * time.Millisecond, Backoff: fastRetry,
		Handler: func(ctx context.Context, job *runtime.Job) error {
			mu.Lock()
			runs[job.ID]++
			block := job.ID == blocker && job.Attempt == 1
			mu.Unlock()
			// A write of the job's own: a job of queue "markers", which no
			// worker serves, naming it.
			if _, err := runtime.Enqueue(ctx, job.Tx(), runtime.EnqueueRequest{Kind: "marker", Payload: []byte(`{}`),
				EnqueueOptions: runtime.EnqueueOptions{Queue: "markers", Metadata: map[string]string{"from": fmt.Sprint(job.ID)}}}); err != nil {
				return err
			}
			if block {
				<-release // ignores its context
			}
			return nil
		}})
	mu.Lock()
	ids := enqueueKinds(t, b, "moody", "moody", "moody", "moody", "moody", "moody", "moody")
	blocker = ids[3]
	mu.Unlock()
	b.waitQueueDone(t, runtime.DefaultQueue, 20*time.Second)
	written, err := b.q.ListJobs(context.Background(), "markers")
	if err != nil {
		t.Fatal(err)
	}
	markers := markersOf(t, written)
	mu.Lock()
	defer mu.Unlock()
	for i, id := range ids {
		j := b.job(t, id)
		switch {
		case j.Status != testdb.PgtaskJobStatusSucceeded:
			t.Errorf("job %d is %s (errors %s)", id, j.Status, j.Errors)
		case markers[id] != 1:
			t.Errorf("job %d's write committed %d times", id, markers[id])
		case id == blocker:
			errs := errorsOf(t, j)
			if j.Attempts != 2 || len(errs) != 1 || !strings.Contains(errs[0].Error, "abandoned") {
				t.Errorf("the abandoned job succeeded after %d attempts with errors %s; want its abandoned attempt counted",
					j.Attempts, j.Errors)
			}
		case j.Attempts != 1 || len(errorsOf(t, j)) != 0:
			t.Errorf("job %d ran %d times and succeeded after %d attempts with errors %s; want one attempt counted",
				id, runs[id], j.Attempts, j.Errors)
		case i < 3 && runs[id] != 2:
			t.Errorf("job %d, before the abandoned one in its batch, ran %d times; want its rolled-back run and another", id, runs[id])
		}
	}
}

// A job cancelled while it waits in a running batch never runs: it ends
// cancelled when its turn comes, and the batch goes on.
func TestHeldBatchCancelledWaitingJobNeverRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started, release := make(chan struct{}), make(chan struct{})
	var gate runtime.JobID = -1
	var mu sync.Mutex
	ran := map[runtime.JobID]bool{}
	startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 1}}},
		runtime.Registration{Kind: "step", Handler: func(ctx context.Context, job *runtime.Job) error {
			mu.Lock()
			ran[job.ID] = true
			g := job.ID == gate
			mu.Unlock()
			if g {
				close(started)
				<-release
			}
			return nil
		}})
	warmUp(t, b, "step", 100)
	mu.Lock()
	ids := enqueueKinds(t, b, "step", "step", "step")
	gate = ids[0]
	mu.Unlock()
	<-started
	victim := ids[1]
	if j := b.job(t, victim); j.Status != testdb.PgtaskJobStatusStarted {
		t.Fatalf("job %d is %s; want it claimed in the gate's batch", victim, j.Status)
	}
	if ok, err := runtime.CancelJob(context.Background(), b.pool, victim); err != nil || !ok {
		t.Fatalf("CancelJob: %v, %v", ok, err)
	}
	// The request reaches the worker before the gate opens.
	time.Sleep(200 * time.Millisecond)
	close(release)
	if j := b.waitStatus(t, victim, 10*time.Second, testdb.PgtaskJobStatusCancelled, testdb.PgtaskJobStatusSucceeded); j.Status != testdb.PgtaskJobStatusCancelled {
		t.Fatalf("the cancelled job is %s", j.Status)
	}
	b.waitStatus(t, ids[2], 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	mu.Lock()
	defer mu.Unlock()
	if ran[victim] {
		t.Error("the cancelled job's handler ran")
	}
}

// Two workers at the default Config race over one busy group and
// ungrouped jobs, some of whose first attempts fail or panic in the middle
// of a batch: the group's jobs still run one at a time in enqueue order, the
// batch's other jobs commit, and every job ends succeeded.
func TestHeldBatchesKeepGroupOrderThroughFailuresAndPanics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 300
	log := newStartLog()
	handler := log.logged(func(job *runtime.Job, p seqPayload) error {
		switch {
		case job.Attempt > 1:
		case p.Seq%13 == 5:
			return errors.New("first attempt fails")
		case p.Seq%17 == 8:
			panic("first attempt panics")
		}
		return nil
	})
	for range 2 {
		startWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "seq", Handler: handler, Backoff: fastRetry})
	}
	reqs := make([]runtime.EnqueueRequest, 0, 2*n)
	for i := range n {
		grouped := runtime.EnqueueRequest{Kind: "seq", Payload: mustJSON(t, seqPayload{Group: "g0", Seq: i})}
		grouped.Apply(runtime.WithGroup("g0"))
		reqs = append(reqs, grouped, runtime.EnqueueRequest{Kind: "seq", Payload: mustJSON(t, seqPayload{Seq: n + i})})
	}
	if _, err := runtime.EnqueueMany(context.Background(), b.pool, reqs); err != nil {
		t.Fatal(err)
	}
	for _, j := range b.waitQueueDone(t, runtime.DefaultQueue, 90*time.Second) {
		if j.Status != testdb.PgtaskJobStatusSucceeded {
			t.Fatalf("job %d is %s: %s", j.ID, j.Status, j.Errors)
		}
	}
	log.checkOrder(t, 1, n)
	commits, err := b.q.CountSuccessCommits(context.Background(), runtime.DefaultQueue)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d jobs, %d commits", 2*n, commits)
}

// A refused outcome in the middle of a batch is isolated and committed
// (commitSoFar) while the batch's later jobs stay claimed in the next
// transaction: should that session then be lost, the worker's own rescue
// leaves those jobs to their runner, which hands back the ones it did not
// start, their attempts returned, instead of running them on a dead
// connection.
func TestHeldBatchRestStaysClaimedAfterARefusedOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	small := smallStack(t, b)
	ctx := context.Background()
	var (
		mu     sync.Mutex
		w      *runtime.Worker
		victim runtime.JobID
		seen   testdb.PgtaskJob
		herr   error
		done   = make(chan struct{})
		once   sync.Once
	)
	killer := runtime.Registration{Kind: "killer", Handler: func(hctx context.Context, job *runtime.Job) error {
		if job.Attempt > 1 {
			return nil
		}
		defer once.Do(func() { close(done) })
		mu.Lock()
		defer mu.Unlock()
		pid, err := testdb.New(job.Tx()).BackendPID(hctx)
		if herr = err; err != nil {
			return nil
		}
		if _, herr = b.q.TerminateBackend(ctx, pid); herr != nil {
			return nil
		}
		for range 200 {
			present, err := b.q.BackendExists(ctx, pid)
			if herr = err; err != nil || !present {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if herr = w.RescueStep(ctx); herr != nil {
			return nil
		}
		seen = b.job(t, victim)
		return nil
	}}
	nap := runtime.Registration{Kind: "nap", Handler: func(context.Context, *runtime.Job) error {
		time.Sleep(20 * time.Millisecond)
		return nil
	}}
	regs := append(outcomeKinds(nil), killer, nap)
	cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{
		runtime.DefaultQueue: {Concurrency: 1, BatchSize: 10, CommitBudget: 10 * time.Millisecond}}}
	ww, stop := newWorkerWith(t, small, cfg, func(w *runtime.Worker) error {
		for _, r := range regs {
			if err := w.Register(r); err != nil {
				return err
			}
		}
		// Every kind is judged quick, so one claim takes the four jobs and
		// none is handed back; the nap then spends the budget, so the
		// batch commits before the killer, and the server refuses the
		// first outcome.
		for _, r := range regs {
			w.PrimePace(runtime.DefaultQueue, time.Microsecond, r.Kind)
		}
		return nil
	})
	t.Cleanup(stop)
	mu.Lock()
	w = ww
	reqs := []runtime.EnqueueRequest{
		{Kind: "outcome", Payload: mustJSON(t, map[string]bool{"deep": true})},
		{Kind: "nap", Payload: []byte(`{}`)},
		{Kind: "killer", Payload: []byte(`{}`)},
		{Kind: "outcome", Payload: mustJSON(t, map[string]bool{})},
	}
	for i := range reqs {
		reqs[i].Apply(runtime.WithMaxAttempts(1))
	}
	ids, err := runtime.EnqueueMany(ctx, b.pool, reqs)
	if err != nil {
		t.Fatal(err)
	}
	victim = ids[3]
	mu.Unlock()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the killer did not run")
	}
	mu.Lock()
	defer mu.Unlock()
	if herr != nil {
		t.Fatal(herr)
	}
	if seen.Status != testdb.PgtaskJobStatusStarted || string(seen.Errors) != "[]" {
		t.Errorf("job %d, claimed and held by its runner, was rescued by the worker's own maintenance: %s, attempts %d, errors %s",
			victim, seen.Status, seen.Attempts, seen.Errors)
	}
	if j := b.waitStatus(t, victim, 15*time.Second, testdb.PgtaskJobStatusSucceeded, testdb.PgtaskJobStatusFailed); j.Status != testdb.PgtaskJobStatusSucceeded {
		t.Errorf("job %d, never started before its session was lost, is %s after %d attempts: %s", victim, j.Status, j.Attempts, j.Errors)
	}
}

// A runner whose claim took several jobs of a kind slower than the commit
// budget (sized by the queue's mostly quick jobs) hands back the ones
// behind the job it starts, so the queue's other runners run them at once.
func TestHeldBatchHandsBackJobsBehindASlowOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	running, most := 0, 0
	slow := runtime.Registration{Kind: "slow", Handler: func(ctx context.Context, job *runtime.Job) error {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(300 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	}}
	cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 3}}}
	_, stop := newWorkerWith(t, b.url, cfg, func(w *runtime.Worker) error {
		if err := w.Register(slow); err != nil {
			return err
		}
		if err := w.Register(runtime.Registration{Kind: "quick", Handler: quick}); err != nil {
			return err
		}
		// As a queue that ran one slow job, then many quick ones.
		w.PrimePace(runtime.DefaultQueue, 300*time.Millisecond, "slow")
		for range 50 {
			w.PrimePace(runtime.DefaultQueue, time.Microsecond, "quick")
		}
		return nil
	})
	t.Cleanup(stop)
	start := time.Now()
	enqueueKinds(t, b, "slow", "slow", "slow", "slow", "slow", "slow")
	for _, j := range b.waitQueueDone(t, runtime.DefaultQueue, 30*time.Second) {
		if j.Status != testdb.PgtaskJobStatusSucceeded || j.Attempts != 1 {
			t.Errorf("job %d is %s after %d attempts", j.ID, j.Status, j.Attempts)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if most < 2 {
		t.Errorf("6 slow jobs ran one at a time on 3 runners (took %v): one runner kept them all", time.Since(start))
	}
}

// Between two jobs of a batch, the successes so far commit before a job of
// a kind expected to take them past the commit budget.
func TestHeldBatchCommitsBeforeAJobThatWouldSpendTheBudget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	var once sync.Once
	cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 1}}}
	_, stop := newWorkerWith(t, b.url, cfg, func(w *runtime.Worker) error {
		if err := w.Register(runtime.Registration{Kind: "quick", Handler: quick}); err != nil {
			return err
		}
		if err := w.Register(runtime.Registration{Kind: "steady", Handler: func(ctx context.Context, job *runtime.Job) error {
			once.Do(func() { close(started) })
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}}); err != nil {
			return err
		}
		// Both kinds have run: "steady" takes 50ms, five times the budget.
		w.PrimePace(runtime.DefaultQueue, time.Microsecond, "quick")
		w.PrimePace(runtime.DefaultQueue, 50*time.Millisecond, "steady")
		for range 50 {
			w.PrimePace(runtime.DefaultQueue, time.Microsecond, "quick")
		}
		return nil
	})
	t.Cleanup(stop)
	ids := enqueueKinds(t, b, "quick", "quick", "quick", "quick", "quick", "steady")
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow job did not start")
	}
	for _, id := range ids[:5] {
		b.waitStatus(t, id, 5*time.Second, testdb.PgtaskJobStatusSucceeded)
	}
	if j := b.job(t, ids[5]); j.Status != testdb.PgtaskJobStatusStarted {
		t.Fatalf("the slow job is %s while its handler runs", j.Status)
	}
}
