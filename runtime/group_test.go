package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

type seqPayload struct {
	Group string `json:"g"`
	Seq   int    `json:"seq"`
}

// startLog records handler starts and checks, while handlers run, that no two
// jobs of a group are inside a handler at once.
type startLog struct {
	mu        sync.Mutex
	starts    map[string][]int // group -> seq of every attempt, in start order
	running   map[string]int
	overlaps  []string
	active    int
	maxActive int
	groupsAt  int // most distinct groups running at once
}

func newStartLog() *startLog {
	return &startLog{starts: map[string][]int{}, running: map[string]int{}}
}

func (l *startLog) begin(p seqPayload) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.starts[p.Group] = append(l.starts[p.Group], p.Seq)
	l.active++
	l.maxActive = max(l.maxActive, l.active)
	if p.Group == "" {
		return
	}
	l.running[p.Group]++
	if l.running[p.Group] > 1 {
		l.overlaps = append(l.overlaps, fmt.Sprintf("group %s: seq %d started while another job of the group ran", p.Group, p.Seq))
	}
	busy := 0
	for _, n := range l.running {
		if n > 0 {
			busy++
		}
	}
	l.groupsAt = max(l.groupsAt, busy)
}

// enqueueGroup enqueues n jobs of kind "seq" into one group of queue, in
// order, and returns their ids.
func enqueueGroup(t *testing.T, b *bundle, queue, group string, n int) []runtime.JobID {
	t.Helper()
	reqs := make([]runtime.EnqueueRequest, n)
	for i := range reqs {
		reqs[i] = runtime.EnqueueRequest{Kind: "seq", Payload: mustJSON(t, seqPayload{Group: group, Seq: i})}
		reqs[i].Apply(runtime.WithQueue(queue), runtime.WithGroup(group))
	}
	ids, err := runtime.EnqueueMany(context.Background(), b.pool, reqs)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// logged makes a handler of "seq" jobs that records its starts in l around h.
func (l *startLog) logged(h func(job *runtime.Job, p seqPayload) error) func(context.Context, *runtime.Job) error {
	return func(_ context.Context, job *runtime.Job) error {
		p, err := runtime.DecodePayload[seqPayload](job)
		if err != nil {
			return err
		}
		l.begin(p)
		defer l.end(p)
		return h(job, p)
	}
}

func (l *startLog) end(p seqPayload) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active--
	if p.Group != "" {
		l.running[p.Group]--
	}
}

// checkOrder asserts that each group's attempts started in enqueue order: the
// seq numbers never go down (a retried job repeats its seq before the next).
func (l *startLog) checkOrder(t *testing.T, groups, perGroup int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, o := range l.overlaps {
		t.Error(o)
	}
	for g := range groups {
		key := fmt.Sprintf("g%d", g)
		seqs := l.starts[key]
		seen := map[int]bool{}
		for i, s := range seqs {
			if i > 0 && s < seqs[i-1] {
				t.Errorf("group %s started seq %d after seq %d: %v", key, s, seqs[i-1], seqs)
				break
			}
			seen[s] = true
		}
		if len(seen) != perGroup {
			t.Errorf("group %s ran %d distinct jobs, want %d", key, len(seen), perGroup)
		}
	}
}

// Several workers (each its own pool, as separate processes would have) with
// different batch sizes race over grouped and ungrouped jobs, some of which
// fail and wait out a retry.
func TestGroupsRunOneAtATimeInEnqueueOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const groups, perGroup, ungrouped = 30, 20, 150
	log := newStartLog()
	handler := func(ctx context.Context, job *runtime.Job) error {
		p, err := runtime.DecodePayload[seqPayload](job)
		if err != nil {
			return err
		}
		if p.Group != job.Group {
			return runtime.NoRetry(fmt.Errorf("job group %q, payload group %q", job.Group, p.Group))
		}
		log.begin(p)
		defer log.end(p)
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		if p.Seq%7 == 3 && job.Attempt == 1 {
			return errors.New("first attempt fails; the group must wait for the retry")
		}
		return nil
	}
	for _, batch := range []int{0, 1, 8} {
		startWorker(t, b.url, runtime.Config{
			Queues: map[string]runtime.QueueConfig{"fifo": {Concurrency: 5, BatchSize: batch}},
		}, runtime.Registration{Kind: "seq", Handler: handler, Backoff: fastRetry})
	}
	// Lease-mode workers race with them over the same queue.
	for range 2 {
		startWorker(t, b.url, runtime.Config{
			Queues: map[string]runtime.QueueConfig{"fifo": {Mode: runtime.ModeLease, Concurrency: 20}},
		}, runtime.Registration{Kind: "seq", Handler: handler, Backoff: fastRetry})
	}

	// One producer, in order per group: some jobs singly, most in batches
	// that mix groups.
	ctx := context.Background()
	var batch []runtime.EnqueueRequest
	flush := func() {
		if _, err := runtime.EnqueueMany(ctx, b.pool, batch); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	next := make([]int, groups)
	for n := 0; n < groups*perGroup; n++ {
		g := rand.IntN(groups)
		for next[g] == perGroup {
			g = (g + 1) % groups
		}
		key := fmt.Sprintf("g%d", g)
		req := runtime.EnqueueRequest{Kind: "seq", Payload: mustJSON(t, seqPayload{Group: key, Seq: next[g]})}
		req.Apply(runtime.WithQueue("fifo"), runtime.WithGroup(key))
		next[g]++
		if n%5 == 0 {
			flush()
			if _, err := runtime.Enqueue(ctx, b.pool, req); err != nil {
				t.Fatal(err)
			}
			continue
		}
		batch = append(batch, req)
		if n%10 == 1 {
			req := runtime.EnqueueRequest{Kind: "seq", Payload: mustJSON(t, seqPayload{Seq: n})}
			req.Apply(runtime.WithQueue("fifo"))
			batch = append(batch, req)
		}
		if len(batch) >= 25 {
			flush()
		}
	}
	for n := range ungrouped - groups*perGroup/10 {
		req := runtime.EnqueueRequest{Kind: "seq", Payload: mustJSON(t, seqPayload{Seq: -n})}
		req.Apply(runtime.WithQueue("fifo"))
		batch = append(batch, req)
	}
	flush()

	jobs := b.waitQueueDone(t, "fifo", 90*time.Second)
	if len(jobs) != groups*perGroup+ungrouped {
		t.Fatalf("%d jobs in the queue, want %d", len(jobs), groups*perGroup+ungrouped)
	}
	for _, j := range jobs {
		if j.Status != testdb.PgtaskJobStatusSucceeded {
			t.Fatalf("job %d is %s: %s", j.ID, j.Status, j.Errors)
		}
	}
	log.checkOrder(t, groups, perGroup)
	if log.groupsAt < 2 || log.maxActive < 4 {
		t.Errorf("at most %d groups and %d jobs ran at once; groups and ungrouped jobs should run in parallel", log.groupsAt, log.maxActive)
	}
	groupsLeft, err := b.q.CountJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("most jobs at once: %d, most groups at once: %d, final counts: %+v", log.maxActive, log.groupsAt, groupsLeft)
}

// A job waiting for its retry keeps its place: nothing behind it in the
// group starts. A final failure either lets the group move on (default) or
// blocks it until the job is retried or cancelled. With batches, a group's
// following jobs are claimed with its head and must obey the same rules.
func TestFinalFailureSkipsOrBlocksTheGroup(t *testing.T) {
	for _, batch := range []int{1, 8} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			t.Parallel()
			testSkipOrBlock(t, batch)
		})
	}
}

func testSkipOrBlock(t *testing.T, batch int) {
	b := setup(t)
	ctx := context.Background()
	var mu sync.Mutex
	var order []string
	startBatching(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {BatchSize: batch}}}, runtime.Registration{
		Kind:    "step",
		Backoff: runtime.Backoff{Min: 150 * time.Millisecond, Max: 150 * time.Millisecond, Jitter: -1},
		Handler: func(ctx context.Context, job *runtime.Job) error {
			p, err := runtime.DecodePayload[struct{ Name string }](job)
			if err != nil {
				return err
			}
			mu.Lock()
			order = append(order, p.Name)
			mu.Unlock()
			if p.Name[0] == 'x' && job.Attempt == 1 || p.Name == "x2" {
				return errors.New("fails")
			}
			return nil
		},
	})
	step := func(name, group string, opts ...runtime.EnqueueOption) runtime.JobID {
		return enqueue(t, b.pool, "step", map[string]string{"Name": name}, append(opts, runtime.WithGroup(group))...)
	}
	started := func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprint(order)
	}
	// Group a: x1 fails once and retries; a2 waits for it. x2 fails for good;
	// a3 runs after it.
	step("x1", "a", runtime.WithMaxAttempts(3))
	step("a2", "a")
	x2 := step("x2", "a", runtime.WithMaxAttempts(2))
	a3 := step("a3", "a")
	b.waitStatus(t, a3, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	if j := b.job(t, x2); j.Status != testdb.PgtaskJobStatusFailed || j.Attempts != 2 {
		t.Fatalf("x2: %s after %d attempts", j.Status, j.Attempts)
	}
	if got, want := started(), "[x1 x1 a2 x2 x2 a3]"; got != want {
		t.Fatalf("start order %s, want %s", got, want)
	}

	// Group b: xb, the head, blocks the group when it fails for good.
	mu.Lock()
	order = nil
	mu.Unlock()
	xb := step("xb", "b", runtime.WithMaxAttempts(1), runtime.WithFailBlocksGroup(true))
	b2 := step("b2", "b")
	b.waitStatus(t, xb, 10*time.Second, testdb.PgtaskJobStatusFailed)
	time.Sleep(300 * time.Millisecond)
	if j := b.job(t, b2); j.Status != testdb.PgtaskJobStatusQueued || j.IsHead || j.Attempts != 0 {
		t.Fatalf("b2 behind a blocking failure is %s (head %v, %d attempts), want queued, waiting, untried", j.Status, j.IsHead, j.Attempts)
	}
	// A retry gives the blocker a fresh set of attempts: it runs again (and
	// fails again, as x-jobs fail their first attempt). Cancelling it then
	// lets the group move on.
	if ok, err := runtime.RetryJob(ctx, b.pool, xb); err != nil || !ok {
		t.Fatalf("retry: %v %v", ok, err)
	}
	b.waitStatus(t, xb, 10*time.Second, testdb.PgtaskJobStatusFailed)
	if ok, err := runtime.CancelJob(ctx, b.pool, xb); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	b.waitStatus(t, b2, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	info, err := runtime.GetJob(ctx, b.pool, xb)
	if err != nil || info.Status != runtime.StatusCancelled || len(info.Errors) != 3 || !info.Errors[1].OperatorRetry ||
		info.Errors[2].OperatorRetry || info.Errors[2].At.IsZero() {
		t.Fatalf("xb: %+v, %v; want cancelled with two failed attempts on record, the retry between them", info, err)
	}
	if got, want := started(), "[xb xb b2]"; got != want {
		t.Fatalf("start order %s, want %s", got, want)
	}
	waitGroupGone(t, b, runtime.DefaultQueue, "b")

	// Group c: the blocker is not the head but runs right behind it (in one
	// run when batches are larger than one): c3 must still wait.
	mu.Lock()
	order = nil
	mu.Unlock()
	c1 := step("c1", "c")
	xc := step("xc", "c", runtime.WithMaxAttempts(1), runtime.WithFailBlocksGroup(true))
	c3 := step("c3", "c")
	b.waitStatus(t, c1, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	b.waitStatus(t, xc, 10*time.Second, testdb.PgtaskJobStatusFailed)
	time.Sleep(300 * time.Millisecond)
	if j := b.job(t, c3); j.Status != testdb.PgtaskJobStatusQueued || j.Attempts != 0 {
		t.Fatalf("c3 behind a blocking failure is %s after %d attempts, want queued and untried", j.Status, j.Attempts)
	}
	if g, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: runtime.DefaultQueue, GroupKey: "c"}); err != nil || g.HeadID != int64(xc) {
		t.Fatalf("group c: %+v, %v; want its head to be the blocker %d", g, err, xc)
	}
	if ok, err := runtime.CancelJob(ctx, b.pool, xc); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	b.waitStatus(t, c3, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	if got, want := started(), "[c1 xc c3]"; got != want {
		t.Fatalf("start order %s, want %s", got, want)
	}
}

// One busy group worked by two workers with large batches: the group's runs
// keep order and never overlap, through failures and retries.
func TestHotGroupRunsInOrderWithBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 300
	log := newStartLog()
	handler := log.logged(func(job *runtime.Job, p seqPayload) error {
		if p.Seq%13 == 5 && job.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	})
	for range 2 {
		startBatching(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{"hot": {Concurrency: 2, BatchSize: 16}}},
			runtime.Registration{Kind: "seq", Handler: handler, Backoff: fastRetry})
	}
	enqueueGroup(t, b, "hot", "g0", n)
	for _, j := range b.waitQueueDone(t, "hot", 60*time.Second) {
		if j.Status != testdb.PgtaskJobStatusSucceeded {
			t.Fatalf("job %d is %s: %s", j.ID, j.Status, j.Errors)
		}
	}
	log.checkOrder(t, 1, n)
	waitGroupGone(t, b, "hot", "g0")
}

// A job retried after its group drained and started again joins the group's
// new row: it runs after the current head, in id order, and the group's jobs
// still run one at a time.
func TestRetryJoinsTheGroupsNewRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	old := enqueue(t, b.pool, "k", seqPayload{Group: "g", Seq: 1}, runtime.WithGroup("g"))
	if ok, err := b.gen.CancelJob(ctx, int64(old)); err != nil || !ok {
		t.Fatalf("cancel: %v, %v", ok, err)
	}
	if _, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: runtime.DefaultQueue, GroupKey: "g"}); err == nil {
		t.Fatal("the group's row outlived its last job")
	}
	head := enqueue(t, b.pool, "k", seqPayload{Group: "g", Seq: 0}, runtime.WithGroup("g"))
	last := enqueue(t, b.pool, "k", seqPayload{Group: "g", Seq: 2}, runtime.WithGroup("g"))
	if r, err := b.gen.RetryJob(ctx, int64(old)); err != nil || !r.Retried {
		t.Fatalf("retry: %+v, %v", r, err)
	}
	if j := b.job(t, old); j.IsHead || j.Status != testdb.PgtaskJobStatusQueued {
		t.Fatalf("retried job: head %v, %s; want queued behind the head", j.IsHead, j.Status)
	}

	log := newStartLog()
	startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 2}}},
		runtime.Registration{Kind: "k", Handler: func(ctx context.Context, job *runtime.Job) error {
			p, err := runtime.DecodePayload[seqPayload](job)
			if err != nil {
				return err
			}
			log.begin(p)
			time.Sleep(10 * time.Millisecond)
			log.end(p)
			return nil
		}})
	for _, id := range []runtime.JobID{head, old, last} {
		b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if got := fmt.Sprint(log.starts["g"]); got != "[0 1 2]" || len(log.overlaps) > 0 {
		t.Fatalf("group ran seqs %s (overlaps %v), want [0 1 2]: the head, then the retried job, then the last", got, log.overlaps)
	}
}

// A batch written by other code that lists one new group twice: the group's
// head is still the batch's first job of it.
func TestBatchListingAGroupTwiceKeepsItsFirstJobAsHead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	row, err := b.gen.InsertJobs(ctx, gen.InsertJobsParams{
		Payloads: []json.RawMessage{json.RawMessage(`{}`), json.RawMessage(`{}`), json.RawMessage(`{}`)},
		Settings: []int32{1, 1, 1}, Groups: []int32{2, 1, 2},
		Kinds: []string{"k"}, Queues: []string{"q"}, Priorities: []int16{0}, AgingMs: []int32{0},
		MaxAttempts: []int32{1}, FailBlocksGroup: []bool{false}, RunAt: []string{""}, DelayUs: []int64{0},
		GroupQueues: []string{"q", "q"}, GroupKeys: []string{"g", "g"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ids := row.Ids
	g, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: "q", GroupKey: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if g.HeadID != ids[0] {
		t.Fatalf("group head %d, want the batch's first job %d", g.HeadID, ids[0])
	}
	for i, id := range ids {
		if j := b.job(t, runtime.JobID(id)); j.IsHead != (i == 0) || !j.GroupID.Valid || j.GroupID.Int64 != g.ID {
			t.Errorf("job %d: head %v, group id %v; want head only for the first, group id %d", i, j.IsHead, j.GroupID.Int64, g.ID)
		}
	}
}

// A database or role may default to REPEATABLE READ, under which advancing a
// group would miss a job committed after its snapshot and strand it. A
// worker's sessions run at READ COMMITTED whatever the default, enqueueing
// works from transactions at any level, and an operator's change in a
// REPEATABLE READ transaction is refused, not done.
func TestGroupsNeedReadCommittedWhateverTheDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_transaction_isolation", "repeatable read")
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // libpq-style URLs take no '+' for a space
	repeatable := u.String()

	levels := make(chan string, 10)
	startBatching(t, repeatable, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 1, BatchSize: 5}}},
		runtime.Registration{Kind: "k", Handler: func(ctx context.Context, job *runtime.Job) error {
			level, err := testdb.New(job.Tx()).TransactionIsolation(ctx)
			levels <- level
			return err
		}})
	var ids []runtime.JobID
	for range 3 {
		ids = append(ids, enqueue(t, b.pool, "k", map[string]int{}, runtime.WithGroup("g")))
	}
	for _, id := range ids {
		b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	}
	for range ids {
		if level := <-levels; level != "read committed" {
			t.Errorf("a job transaction ran at %s, want read committed", level)
		}
	}

	// Enqueueing works at any level: into the existing group g and a new
	// group n, from SERIALIZABLE and REPEATABLE READ transactions.
	for _, level := range []pgx.TxIsoLevel{pgx.Serializable, pgx.RepeatableRead} {
		tx, err := b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
		if err != nil {
			t.Fatal(err)
		}
		more := []runtime.JobID{
			enqueue(t, tx, "k", map[string]int{}, runtime.WithGroup("g")),
			enqueue(t, tx, "k", map[string]int{}, runtime.WithGroup("n"+string(level))),
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		for _, id := range more {
			b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
			if level := <-levels; level != "read committed" {
				t.Errorf("a job transaction ran at %s, want read committed", level)
			}
		}
	}

	pool, err := pgxpool.New(ctx, repeatable)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	id := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithGroup("h"), runtime.WithDelay(time.Hour))
	_, err = gen.New(pool).CancelJob(ctx, int64(id))
	if err == nil || !strings.Contains(err.Error(), "changing a job needs a READ COMMITTED transaction, not REPEATABLE READ") {
		t.Fatalf("cancel at repeatable read: err = %v", err)
	}
	if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusScheduled {
		t.Fatalf("the refused cancel left the job %s", j.Status)
	}
}

// A group's next job is looked for from its last head on; its row keeps no
// bound (pending_from) while no pending job is below the head. A retry of an
// older job of the group sets the bound to it, so the retried job still runs
// next, and the advance that passes it clears it.
func TestGroupLooksForItsNextJobFromItsLastHead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := idleWorker(t, b.url, runtime.Config{})
	var failing atomic.Bool
	failing.Store(true)
	if err := w.Register(runtime.Registration{Kind: "step", Handler: func(_ context.Context, job *runtime.Job) error {
		p, err := runtime.DecodePayload[struct{ Fail bool }](job)
		if err != nil {
			return err
		}
		if p.Fail && failing.Load() {
			return runtime.NoRetry(errors.New("fails"))
		}
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	step := func(fail bool) runtime.JobID {
		return enqueue(t, b.pool, "step", map[string]bool{"Fail": fail}, runtime.WithGroup("g"))
	}
	group := func() testdb.GetGroupRow {
		t.Helper()
		g, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: runtime.DefaultQueue, GroupKey: "g"})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	work := func(want runtime.JobID, status runtime.Status) {
		t.Helper()
		info, err := w.WorkOne(ctx)
		if err != nil || info == nil || info.ID != want || info.Status != status {
			t.Fatalf("WorkOne: %+v, %v; want job %d %s", info, err, want, status)
		}
	}
	a1, a2, a3 := step(true), step(false), step(false)
	if g := group(); g.PendingFrom.Valid {
		t.Fatalf("new group: pending_from %d, want none", g.PendingFrom.Int64)
	}
	work(a1, runtime.StatusFailed)
	if g := group(); g.HeadID != int64(a2) || g.PendingFrom.Valid {
		t.Fatalf("after the head failed: head %d, pending_from %+v; want head %d and no bound", g.HeadID, g.PendingFrom, a2)
	}
	if ok, err := runtime.RetryJob(ctx, b.pool, a1); err != nil || !ok {
		t.Fatalf("retry: %v, %v", ok, err)
	}
	if g := group(); g.HeadID != int64(a2) || g.PendingFrom.Int64 != int64(a1) {
		t.Fatalf("after the retry: head %d, pending_from %+v; want head %d, pending_from %d", g.HeadID, g.PendingFrom, a2, a1)
	}
	failing.Store(false)
	work(a2, runtime.StatusSucceeded)
	if g := group(); g.HeadID != int64(a1) || g.PendingFrom.Valid {
		t.Fatalf("after the retried job's turn came: head %d, pending_from %+v; want head %d and no bound", g.HeadID, g.PendingFrom, a1)
	}
	work(a1, runtime.StatusSucceeded)
	work(a3, runtime.StatusSucceeded)
	if info, err := w.WorkOne(ctx); info != nil || err != nil {
		t.Fatalf("WorkOne after the group: %+v, %v; want nothing", info, err)
	}
	if _, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: runtime.DefaultQueue, GroupKey: "g"}); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("group g after its last job: %v, want no row", err)
	}
}

// Two enqueues creating one group at once can leave a job of it below the
// group's pending_from. Both ways of moving a group on look below the bound
// before they give the group up: the job runs, and the group's row stays
// until it has.
func TestGroupFindsAJobBelowItsBound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := idleWorker(t, b.url, runtime.Config{})
	if err := w.Register(runtime.Registration{Kind: "ok", Handler: func(context.Context, *runtime.Job) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	raise := func(key string, above runtime.JobID) {
		t.Helper()
		if err := b.q.SetGroupPendingFrom(ctx, testdb.SetGroupPendingFromParams{
			Queue: runtime.DefaultQueue, GroupKey: key, PendingFrom: pgtype.Int8{Int64: int64(above) + 1, Valid: true},
		}); err != nil {
			t.Fatal(err)
		}
	}
	head := func(key string) int64 {
		t.Helper()
		g, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: runtime.DefaultQueue, GroupKey: key})
		if err != nil {
			t.Fatalf("group %s: %v", key, err)
		}
		return g.HeadID
	}

	// A worker moving the group on after its head (advance_one_group).
	c1 := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithGroup("c"))
	c2 := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithGroup("c"))
	raise("c", c2)
	if info, err := w.WorkOne(ctx); err != nil || info == nil || info.ID != c1 {
		t.Fatalf("WorkOne: %+v, %v; want job %d", info, err, c1)
	}
	if got := head("c"); got != int64(c2) {
		t.Fatalf("group c: head %d, want %d, the job below its bound", got, c2)
	}
	if info, err := w.WorkOne(ctx); err != nil || info == nil || info.ID != c2 || info.Status != runtime.StatusSucceeded {
		t.Fatalf("WorkOne: %+v, %v; want job %d succeeded", info, err, c2)
	}

	// An operator's cancel of the head (advance_group_set).
	e1 := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithGroup("e"))
	e2 := enqueue(t, b.pool, "ok", map[string]int{}, runtime.WithGroup("e"))
	raise("e", e2)
	if ok, err := runtime.CancelJob(ctx, b.pool, e1); err != nil || !ok {
		t.Fatalf("cancel: %v, %v", ok, err)
	}
	if got := head("e"); got != int64(e2) {
		t.Fatalf("group e: head %d, want %d, the job below its bound", got, e2)
	}
	if info, err := w.WorkOne(ctx); err != nil || info == nil || info.ID != e2 || info.Status != runtime.StatusSucceeded {
		t.Fatalf("WorkOne: %+v, %v; want job %d succeeded", info, err, e2)
	}
}

// An enqueue that finds a group missing takes its ids first, then creates
// the group's row; meanwhile another transaction can create the row, and a
// worker move the group on past those ids. The enqueue that joins the row
// then lowers where the group's next job is looked for, so its job runs
// next, not behind jobs enqueued after it committed.
func TestEnqueueJoiningAGroupCreatedMeanwhileRunsNext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := idleWorker(t, b.url, runtime.Config{})
	if err := w.Register(runtime.Registration{Kind: "k", Handler: func(context.Context, *runtime.Job) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	// A transaction creates group a and stays open; the late enqueue, into
	// groups b and a, creates a's row first (in key order) and waits there.
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	enqueue(t, tx, "k", map[string]int{}, runtime.WithGroup("a"))
	late := enqueueAsync(t, b.pool, "b", "a")
	waitBlockedBy(t, b, tx, "an enqueue creating group a")

	// Group b is created by others, and moves on past the late ids.
	b1 := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithGroup("b"))
	b2 := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithGroup("b"))
	if info, err := w.WorkOne(ctx); err != nil || info == nil || info.ID != b1 {
		t.Fatalf("WorkOne: %+v, %v; want job %d", info, err, b1)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var lateB runtime.JobID
	select {
	case ids := <-late:
		if ids == nil {
			t.FailNow()
		}
		lateB = ids[0]
	case <-time.After(10 * time.Second):
		t.Fatal("the late enqueue still waits after the other transaction committed")
	}
	if lateB > b1 {
		t.Fatalf("the late job %d was numbered after group b's first job %d: the race did not happen", lateB, b1)
	}
	b3 := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithGroup("b"))

	var order []runtime.JobID
	for {
		info, err := w.WorkOne(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info == nil {
			break
		}
		if j := b.job(t, info.ID); j.GroupKey != nil && *j.GroupKey == "b" {
			order = append(order, info.ID)
		}
	}
	if got, want := fmt.Sprint(order), fmt.Sprint([]runtime.JobID{b2, lateB, b3}); got != want {
		t.Fatalf("group b ran %s after its first job, want %s: the late job next", got, want)
	}
}

// A group's row is written when the group starts and when it empties, not
// for each job the group runs: while another session keeps a transaction
// open, every version a row leaves behind stays, and each lookup of the row
// (by every enqueue into the group and every advance of it) would step over
// all of them. Jobs run here in both modes at the default Config, alone and
// in runs, with a scheduled job keeping the group's row alive at the end.
func TestGroupRowIsNotRewrittenAsItsJobsRun(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			const n = 60
			var ran atomic.Int64
			for i := range n {
				enqueue(t, b.pool, "step", map[string]int{"N": i}, runtime.WithGroup("g"))
			}
			last := enqueue(t, b.pool, "step", map[string]int{"N": n}, runtime.WithGroup("g"), runtime.WithDelay(time.Hour))
			before, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: runtime.DefaultQueue, GroupKey: "g"})
			if err != nil {
				t.Fatal(err)
			}
			startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: mode}}},
				runtime.Registration{Kind: "step", Handler: func(context.Context, *runtime.Job) error {
					ran.Add(1)
					return nil
				}})
			deadline := time.Now().Add(30 * time.Second)
			for {
				g, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: runtime.DefaultQueue, GroupKey: "g"})
				if err != nil {
					t.Fatal(err)
				}
				if g.HeadID == int64(last) {
					if g.RowXmin != before.RowXmin {
						t.Fatalf("the group's row was rewritten while %d jobs ran (xmin %s, then %s)", ran.Load(), before.RowXmin, g.RowXmin)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the group did not reach its scheduled job: head %d after %d jobs ran", g.HeadID, ran.Load())
				}
				time.Sleep(10 * time.Millisecond)
			}
			if got := ran.Load(); got != n {
				t.Fatalf("%d jobs ran, want %d", got, n)
			}
		})
	}
}

// A run of a group's jobs behind its head (pick_runs) is looked for from
// the head on, unless the group's row names a pending job below the head:
// an operator's retry of an older job puts one there, which must run right
// after the head, before the jobs a run would take.
func TestRetriedOlderJobRunsBeforeARunBehindTheHead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := idleWorker(t, b.url, runtime.Config{})
	if err := w.Register(runtime.Registration{Kind: "step", Handler: func(context.Context, *runtime.Job) error {
		return runtime.NoRetry(errors.New("fails"))
	}}); err != nil {
		t.Fatal(err)
	}
	var ids []runtime.JobID
	for i := range 6 {
		ids = append(ids, enqueue(t, b.pool, "step", map[string]int{"N": i}, runtime.WithGroup("g")))
	}
	if info, err := w.WorkOne(ctx); err != nil || info == nil || info.ID != ids[0] || info.Status != runtime.StatusFailed {
		t.Fatalf("WorkOne: %+v, %v; want job %d failed", info, err, ids[0])
	}
	if ok, err := runtime.RetryJob(ctx, b.pool, ids[0]); err != nil || !ok {
		t.Fatalf("retry: %v, %v", ok, err)
	}
	var mu sync.Mutex
	var order []runtime.JobID
	startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {BatchSize: 10}}},
		runtime.Registration{Kind: "step", Handler: func(_ context.Context, job *runtime.Job) error {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, job.ID)
			return nil
		}})
	b.waitQueueDone(t, runtime.DefaultQueue, 30*time.Second)
	mu.Lock()
	defer mu.Unlock()
	want := []runtime.JobID{ids[1], ids[0], ids[2], ids[3], ids[4], ids[5]}
	if !slices.Equal(order, want) {
		t.Fatalf("ran %v, want %v", order, want)
	}
}

// An operator's retry of a job of a group while a run of the group's jobs
// is in flight (claimed with the head, not finished) must wait for the run:
// the job becomes the head only once the run's last job is done. Before,
// the group moved on from a finished job of the run to the retried one,
// which then ran beside the rest of the run: a job below the head, and one
// the run had stepped over (cancelled when the run was claimed).
func TestRetriedJobWaitsForARunInFlight(t *testing.T) {
	for _, tc := range []struct {
		name string
		// The job cancelled before the claim and retried while the run is
		// at seq pause; seq check waits to see whether it starts beside it.
		cancelled, pause, check int
		want                    []int
	}{
		{"below the head", 0, 2, 3, []int{1, 2, 3, 0}},
		{"inside the run", 1, 0, 2, []int{0, 2, 3, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testRetriedJobWaitsForARunInFlight(t, tc.cancelled, tc.pause, tc.check, tc.want)
		})
	}
}

func testRetriedJobWaitsForARunInFlight(t *testing.T, cancelled, pause, check int, want []int) {
	b := setup(t)
	ctx := context.Background()
	ids := enqueueGroup(t, b, runtime.DefaultQueue, "g", 4)
	if ok, err := runtime.CancelJob(ctx, b.pool, ids[cancelled]); err != nil || !ok {
		t.Fatalf("cancel: %v, %v", ok, err)
	}
	log := newStartLog()
	paused := make(chan struct{})
	retried := make(chan struct{})
	retriedStarted := make(chan struct{})
	handler := log.logged(func(job *runtime.Job, p seqPayload) error {
		switch p.Seq {
		case cancelled:
			close(retriedStarted)
		case pause:
			close(paused)
			<-retried
		case check:
			// Long enough for the retried job to be claimed and started by
			// a free slot, had the group moved on to it.
			select {
			case <-retriedStarted:
			case <-time.After(time.Second):
			}
		}
		return nil
	})
	// Room for the head and its run of two, and a free slot beside them.
	startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{
		runtime.DefaultQueue: {Mode: runtime.ModeLease, Concurrency: 4},
	}}, runtime.Registration{Kind: "seq", Handler: handler})
	select {
	case <-paused:
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not reach the job it pauses at")
	}
	if ok, err := runtime.RetryJob(ctx, b.pool, ids[cancelled]); err != nil || !ok {
		t.Fatalf("retry: %v, %v", ok, err)
	}
	close(retried)
	jobs := b.waitQueueDone(t, runtime.DefaultQueue, 30*time.Second)
	for _, j := range jobs {
		if j.Status != testdb.PgtaskJobStatusSucceeded {
			t.Errorf("job %d is %s", j.ID, j.Status)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, o := range log.overlaps {
		t.Error(o)
	}
	if !slices.Equal(log.starts["g"], want) {
		t.Errorf("group ran seqs %v, want %v", log.starts["g"], want)
	}
}
