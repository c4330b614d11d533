package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// keyGauge counts, per limit key, the handlers running now across every
// worker of a test, and the most seen at once.
type keyGauge struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
}

func newKeyGauge() *keyGauge {
	return &keyGauge{running: map[string]int{}, most: map[string]int{}}
}

func (g *keyGauge) enter(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running[key]++
	g.most[key] = max(g.most[key], g.running[key])
}

func (g *keyGauge) leave(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running[key]--
}

func (g *keyGauge) mostOf(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.most[key]
}

// A concurrency limit holds across every worker: three workers of
// Concurrency 4 each run jobs of two keys limited to 3 and 2, and of the
// queue's own limit of 4 (no key), while jobs fail and retry with backoff
// (giving their slot up meanwhile), snooze, and more jobs are enqueued as
// they run, one by one and in batches. No key ever runs more than its
// limit, each runs several at once (it does not serialise), every
// job succeeds, and every key's slots are all free at the end.
func TestConcurrencyLimitHoldsAcrossWorkers(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			gauge := newKeyGauge()
			limits := map[string]int{"a": 3, "b": 2, "": 4}
			var failed sync.Map
			handler := func(ctx context.Context, job *runtime.Job) error {
				var p struct {
					Key string `json:"key"`
					N   int    `json:"n"`
				}
				if err := json.Unmarshal(job.Payload, &p); err != nil {
					return err
				}
				gauge.enter(p.Key)
				defer gauge.leave(p.Key)
				// Longer than a held batch's commit budget: each runner's batches
				// hold one job, so the keys' slots spread over runners.
				time.Sleep(time.Duration(12+rand.IntN(8)) * time.Millisecond)
				switch {
				case p.N%7 == 0 && job.Attempt == 1:
					if _, loaded := failed.LoadOrStore(p.N, true); !loaded {
						return errors.New("first attempt fails")
					}
				case p.N%11 == 0 && job.Snoozes == 0:
					return runtime.Snooze(5 * time.Millisecond)
				}
				return nil
			}
			cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{"lim": {Mode: mode, Concurrency: 4}}}
			reg := runtime.Registration{Kind: "limited", Queue: "lim", Handler: handler, Backoff: fastRetry}
			opts := func(key string) []runtime.EnqueueOption {
				return []runtime.EnqueueOption{runtime.WithQueue("lim"), runtime.WithLimit(key, limits[key])}
			}
			var ids []runtime.JobID
			n := 0
			add := func(key string) {
				n++
				ids = append(ids, enqueue(t, b.pool, "limited", map[string]any{"key": key, "n": n}, opts(key)...))
			}
			for range 20 {
				for _, key := range []string{"a", "b", ""} {
					add(key)
				}
			}
			for range 3 {
				startWorker(t, b.url, cfg, reg)
			}
			// More while they run: single enqueues and a batch mixing keys.
			for range 10 {
				for _, key := range []string{"a", "b", ""} {
					add(key)
				}
				time.Sleep(5 * time.Millisecond)
			}
			var reqs []runtime.EnqueueRequest
			for i := range 60 {
				key := []string{"a", "b", ""}[i%3]
				n++
				r := runtime.EnqueueRequest{Kind: "limited", Payload: mustJSON(t, map[string]any{"key": key, "n": n})}
				r.Apply(opts(key)...)
				reqs = append(reqs, r)
			}
			more, err := runtime.EnqueueMany(ctx, b.pool, reqs)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, more...)
			for _, id := range ids {
				b.waitStatus(t, id, 30*time.Second, testdb.PgtaskJobStatusSucceeded)
			}
			for key, limit := range limits {
				if got := gauge.mostOf(key); got > limit {
					t.Errorf("key %q: %d jobs ran at once, over its limit of %d", key, got, limit)
				} else if got < 2 {
					// Whether a key reaches its full limit depends on the
					// machine's timing; running one at a time would be
					// the limit serialising them.
					t.Errorf("key %q: at most %d jobs ran at once (its limit %d): the limit serialised them", key, got, limit)
				}
			}
			waitLimitsIdle(t, b, "lim", limits)
		})
	}
}

// waitLimitsIdle waits until every key of queue has all its slots free and
// nothing waiting, as it must once its jobs have ended (slots left to
// maintenance come back within a round or two).
func waitLimitsIdle(t *testing.T, b *bundle, queue string, limits map[string]int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		infos, err := runtime.Limits(context.Background(), b.pool, queue, 0)
		if err != nil {
			t.Fatal(err)
		}
		var off []string
		for _, in := range infos {
			if in.Free != in.Limit || in.Running != 0 || in.Waiting != 0 || in.Limit != limits[in.Key] {
				off = append(off, fmt.Sprintf("%+v", in))
			}
		}
		if len(infos) != len(limits) {
			off = append(off, fmt.Sprintf("%d keys, want %d", len(infos), len(limits)))
		}
		if len(off) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("limit keys of %s not idle: %v", queue, off)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The enqueue refuses what a limit cannot be: a grouped job with a limit, a
// key without a limit, a limit below 0.
func TestEnqueueRefusesBadLimits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		name string
		opts []runtime.EnqueueOption
		want string
	}{
		{"grouped", []runtime.EnqueueOption{runtime.WithGroup("g"), runtime.WithLimit("k", 2)}, "a grouped job cannot have a limit"},
		{"key without a limit", []runtime.EnqueueOption{runtime.WithLimit("k", 0)}, `limit key "k" without a limit`},
		{"negative", []runtime.EnqueueOption{runtime.WithLimit("k", -1)}, "limit -1 is out of range"},
	} {
		req := runtime.EnqueueRequest{Kind: "k", Payload: mustJSON(t, map[string]int{})}
		req.Apply(c.opts...)
		_, err := runtime.Enqueue(context.Background(), b.pool, req)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one saying %q", c.name, err, c.want)
		}
	}
}

// What becomes of jobs that find their key at its limit, by strategy, with
// no worker running: the key's slot is taken by its first job, and the
// strategy decides about the rest, enqueued one by one and in a batch.
func TestLimitStrategiesAtTheLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	status := func(id runtime.JobID) testdb.PgtaskJobStatus { return b.job(t, id).Status }
	admitted := func(id runtime.JobID) bool {
		j := b.job(t, id)
		return j.IsHead && j.Status == testdb.PgtaskJobStatusQueued
	}
	one := func(key string, s runtime.LimitStrategy) runtime.JobID {
		return enqueue(t, b.pool, "k", map[string]int{}, runtime.WithLimit(key, 1), runtime.WithLimitStrategy(s))
	}
	const queued, cancelled = testdb.PgtaskJobStatusQueued, testdb.PgtaskJobStatusCancelled

	// cancel_newest: every job that finds no slot is cancelled, with why.
	first := one("cn", runtime.LimitCancelNewest)
	late := one("cn", runtime.LimitCancelNewest)
	if !admitted(first) || status(late) != cancelled {
		t.Errorf("cancel_newest: first admitted %v, late %s; want admitted, cancelled", admitted(first), status(late))
	}
	if errs := errorsOf(t, b.job(t, late)); len(errs) != 1 || !strings.Contains(errs[0].Error, "cancel_newest") {
		t.Errorf("cancel_newest: the late job's errors %+v do not say why it was cancelled", errs)
	}

	// keep_oldest: the first job that waits stays; later ones are cancelled.
	first = one("ko", runtime.LimitKeepOldest)
	waiting := one("ko", runtime.LimitKeepOldest)
	late = one("ko", runtime.LimitKeepOldest)
	if !admitted(first) || status(waiting) != queued || admitted(waiting) || status(late) != cancelled {
		t.Errorf("keep_oldest: %s/%v %s/%v %s; want admitted, waiting, cancelled",
			status(first), admitted(first), status(waiting), admitted(waiting), status(late))
	}

	// keep_newest: each new job replaces the one waiting; in a batch, the
	// last one stays.
	first = one("kn", runtime.LimitKeepNewest)
	older := one("kn", runtime.LimitKeepNewest)
	var reqs []runtime.EnqueueRequest
	for range 3 {
		r := runtime.EnqueueRequest{Kind: "k", Payload: mustJSON(t, map[string]int{})}
		r.Apply(runtime.WithLimit("kn", 1), runtime.WithLimitStrategy(runtime.LimitKeepNewest))
		reqs = append(reqs, r)
	}
	batch, err := runtime.EnqueueMany(ctx, b.pool, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if !admitted(first) || status(older) != cancelled || status(batch[0]) != cancelled || status(batch[1]) != cancelled ||
		status(batch[2]) != queued || admitted(batch[2]) {
		t.Errorf("keep_newest: first admitted %v, older %s, batch %s %s %s/%v; want admitted, cancelled, cancelled cancelled waiting",
			admitted(first), status(older), status(batch[0]), status(batch[1]), status(batch[2]), admitted(batch[2]))
	}

	// A worker then runs each key's admitted job and the one kept waiting.
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "k", Handler: func(context.Context, *runtime.Job) error { return nil }})
	for _, id := range []runtime.JobID{batch[2], waiting} {
		b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	}
}

// keep_newest under racing enqueues: eight goroutines enqueue into one key
// of limit 1 at once, with no worker. However their transactions
// interleave, the key ends with its one admitted job and exactly one job
// waiting, the others cancelled.
func TestKeepNewestUnderRacingEnqueues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ids []runtime.JobID
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				req := runtime.EnqueueRequest{Kind: "k", Payload: []byte(`{}`)}
				req.Apply(runtime.WithLimit("hot", 1), runtime.WithLimitStrategy(runtime.LimitKeepNewest))
				id, err := runtime.Enqueue(context.Background(), b.pool, req)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	var admittedN, waitingN, cancelledN int
	for _, id := range ids {
		j := b.job(t, id)
		switch {
		case j.Status == testdb.PgtaskJobStatusQueued && j.IsHead:
			admittedN++
		case j.Status == testdb.PgtaskJobStatusQueued:
			waitingN++
		case j.Status == testdb.PgtaskJobStatusCancelled:
			cancelledN++
		}
	}
	if admittedN != 1 || waitingN != 1 || cancelledN != len(ids)-2 {
		t.Errorf("%d jobs: %d admitted, %d waiting, %d cancelled; want 1, 1, the rest", len(ids), admittedN, waitingN, cancelledN)
	}
}

// A held-mode runner claims, behind a key's admitted job, a run of the
// key's waiting jobs and runs them one after another on that one slot: a
// key with a small limit still drains in batches, many jobs per claim and
// commit, rather than a claim per job. 400 quick jobs of one key of limit 2
// take far fewer claims than the 200 they would take at two jobs a claim,
// and never run more than 2 at once.
func TestHeldLimitedKeyDrainsInRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	gauge := newKeyGauge()
	var reqs []runtime.EnqueueRequest
	for range 400 {
		r := runtime.EnqueueRequest{Kind: "quick", Payload: []byte(`{}`)}
		r.Apply(runtime.WithLimit("k", 2))
		reqs = append(reqs, r)
	}
	ids, err := runtime.EnqueueMany(ctx, b.pool, reqs)
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "quick", Handler: func(context.Context, *runtime.Job) error {
		gauge.enter("k")
		defer gauge.leave("k")
		return nil
	}})
	claims := map[int64]bool{}
	for _, id := range ids {
		j := b.waitStatus(t, id, 30*time.Second, testdb.PgtaskJobStatusSucceeded)
		claims[j.ClaimToken.Int64] = true
	}
	if got := gauge.mostOf("k"); got > 2 {
		t.Errorf("%d jobs of the key ran at once, over its limit of 2", got)
	}
	if len(claims) > 100 {
		t.Errorf("400 jobs took %d claims; want runs of many jobs per claim (at most 100 claims)", len(claims))
	}
	t.Logf("400 jobs in %d claims", len(claims))
	waitLimitsIdle(t, b, runtime.DefaultQueue, map[string]int{"k": 2})
}

// A job waiting for a slot of its limit ages like any queued job: a key
// admits its waiting jobs by priority, so without aging a steady supply of
// better jobs would keep a worse one waiting for as long as it lasts. Here
// a key of limit 1 has a priority-5 job waiting behind 300 priority-0 jobs
// enqueued after it; aged to 0 within about 100 ms, it is admitted ahead
// of those still waiting, long before they run out.
func TestWaitingLimitedJobAges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var (
		mu    sync.Mutex
		order []runtime.JobID
	)
	handler := func(ctx context.Context, job *runtime.Job) error {
		mu.Lock()
		order = append(order, job.ID)
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		return nil
	}
	lim := []runtime.EnqueueOption{runtime.WithQueue("lim"), runtime.WithLimit("k", 1)}
	first := enqueue(t, b.pool, "limited", map[string]int{}, lim...)
	worse := enqueue(t, b.pool, "limited", map[string]int{},
		append(lim, runtime.WithPriority(5), runtime.WithAging(20*time.Millisecond))...)
	var reqs []runtime.EnqueueRequest
	for range 300 {
		r := runtime.EnqueueRequest{Kind: "limited", Payload: mustJSON(t, map[string]int{})}
		r.Apply(lim...)
		reqs = append(reqs, r)
	}
	if _, err := runtime.EnqueueMany(ctx, b.pool, reqs); err != nil {
		t.Fatal(err)
	}
	if j := b.job(t, worse); j.IsHead {
		t.Fatalf("job %d was admitted at once; the test needs it waiting", worse)
	}
	startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{"lim": {Concurrency: 2}}},
		runtime.Registration{Kind: "limited", Queue: "lim", Handler: handler})
	b.waitStatus(t, worse, 30*time.Second, testdb.PgtaskJobStatusSucceeded)
	b.waitQueueDone(t, "lim", 30*time.Second)
	mu.Lock()
	defer mu.Unlock()
	at := slices.Index(order, worse)
	t.Logf("the aged job ran %dth of %d", at+1, len(order))
	if order[0] != first || at < 0 || at > 150 {
		t.Errorf("the aged job ran %dth of %d (first %d), want it well before the better jobs enqueued after it ran out",
			at+1, len(order), order[0])
	}
}

// A slot given back while the key's row is held is not kept from a waiting
// job for as long as the row is held. An enqueue holds its key's row until
// its transaction ends, and the caller's transaction may go on for a while:
// meanwhile the key's running job ends with no job waiting that it can see,
// so its slot is left in a check; a job enqueued after that waits too. It
// runs within a maintenance round or two, the transaction still open, and
// the limit holds throughout. The worker logs in as the worker role: what
// it does with the key's checks is within its privileges.
func TestSlotGivenBackWhileAnEnqueueHoldsTheKeyIsUsed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	gauge := newKeyGauge()
	handler := func(ctx context.Context, job *runtime.Job) error {
		gauge.enter("k")
		defer gauge.leave("k")
		time.Sleep(5 * time.Millisecond)
		return nil
	}
	lim := []runtime.EnqueueOption{runtime.WithQueue("lim"), runtime.WithLimit("k", 1)}
	running := enqueue(t, b.pool, "limited", map[string]int{}, lim...)
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	held := enqueue(t, tx, "limited", map[string]int{}, lim...)
	roles := grantTestRoles(t, b, false)
	startWorker(t, urlAs(t, b.url, roles.Worker), runtime.Config{Queues: map[string]runtime.QueueConfig{"lim": {Concurrency: 2}}},
		runtime.Registration{Kind: "limited", Queue: "lim", Handler: handler})
	b.waitStatus(t, running, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	later := enqueue(t, b.pool, "limited", map[string]int{}, lim...)
	deadline := time.Now().Add(2 * time.Second)
	for b.job(t, later).Status != testdb.PgtaskJobStatusSucceeded {
		if time.Now().After(deadline) {
			infos, _ := runtime.Limits(ctx, b.pool, "lim", 0)
			t.Fatalf("job %d is %s 2 s after its enqueue, its key's slot free but held back while a transaction holds the key: %+v",
				later, b.job(t, later).Status, infos)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, held, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	if got := gauge.mostOf("k"); got != 1 {
		t.Errorf("%d jobs of a key limited to 1 ran at once", got)
	}
	waitLimitsIdle(t, b, "lim", map[string]int{"k": 1})
}

// An operator's limit for every key of a queue reaches a key whose first
// job's enqueue was in flight as it was set: that enqueue read the limits
// in force before the operator's commit, and the operator's call could not
// see the key's row yet. Within a maintenance round the key has the
// operator's limit.
func TestEveryKeyLimitReachesAKeyCreatedMeanwhile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	enqueue(t, tx, "limited", map[string]int{}, runtime.WithQueue("lim"), runtime.WithLimit("new", 2))
	if _, err := runtime.SetEveryKeyLimit(ctx, b.pool, "lim", 5); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.gen.CheckLimits(ctx, 100); err != nil {
		t.Fatal(err)
	}
	infos, err := runtime.Limits(ctx, b.pool, "lim", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := runtime.LimitInfo{Queue: "lim", Key: "new", Declared: 2, Limit: 5, Overridden: true, Free: 4, Waiting: 0}
	if len(infos) != 1 || infos[0] != want {
		t.Errorf("limits %+v, want %+v", infos, want)
	}
}

// A slot given back while the key's waiting job is locked by someone else
// is not lost to it. The running job's end hands its slot to the first
// waiting job it can lock; the only one is held by an operator's cancel,
// so the slot goes back to the key's row. The operator's transaction then
// rolls back: the job waits again, and runs within a maintenance round or
// two, with nothing else happening on its key.
func TestSlotGivenBackPastALockedWaitingJobReachesIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	lim := []runtime.EnqueueOption{runtime.WithQueue("lim"), runtime.WithLimit("k", 1)}
	running := enqueue(t, b.pool, "limited", map[string]int{}, lim...)
	waiting := enqueue(t, b.pool, "limited", map[string]int{}, lim...)
	// The key's checks so far (its creation's) are applied before anything
	// else happens: none is left to look at the key again by chance.
	if _, err := b.gen.CheckLimits(ctx, 100); err != nil {
		t.Fatal(err)
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if ok, err := runtime.CancelJob(ctx, tx, waiting); err != nil || !ok {
		t.Fatalf("cancel job %d: %v, %v", waiting, ok, err)
	}
	startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{"lim": {Concurrency: 2}}},
		runtime.Registration{Kind: "limited", Queue: "lim", Handler: func(ctx context.Context, job *runtime.Job) error { return nil }})
	b.waitStatus(t, running, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for b.job(t, waiting).Status != testdb.PgtaskJobStatusSucceeded {
		if time.Now().After(deadline) {
			infos, _ := runtime.Limits(ctx, b.pool, "lim", 0)
			t.Fatalf("job %d is %s 2 s after its key's slot was freed: %+v", waiting, b.job(t, waiting).Status, infos)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitLimitsIdle(t, b, "lim", map[string]int{"k": 1})
}

// Claims admit waiting jobs into their keys' free slots while batches of
// outcomes give slots back, on the same key rows, from many runners at
// once: three workers of Concurrency 4 work keys of limit 1 and 3 with
// short handlers, so that claims race for a key's last slot and settles
// give slots back under them; some attempts fail and wait out a backoff
// (giving their slot up), some snooze, in the held mode some have their
// session terminated under them (the job is rescued, its slot kept), and
// an operator lowers the limit of 3 to 2 and clears it again while they
// run. Sampled in one snapshot every few milliseconds, each key's admitted
// jobs, free slots and slots noted for maintenance add up to its limit,
// and the key of limit 1 never has two admitted jobs started.
func TestLimitSlotsAddUpWhileClaimsAndSettlesRace(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			limits := map[string]int{"one": 1, "few": 3}
			keyOf := func(n int) string { return []string{"one", "few", "few"}[n%3] }
			gauge := newKeyGauge()
			var failed, killed sync.Map
			handler := func(ctx context.Context, job *runtime.Job) error {
				var p struct {
					N int `json:"n"`
				}
				if err := json.Unmarshal(job.Payload, &p); err != nil {
					return err
				}
				gauge.enter(keyOf(p.N))
				defer gauge.leave(keyOf(p.N))
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				switch {
				case p.N%13 == 0 && mode == runtime.ModeHeld && job.Attempt == 1:
					if _, loaded := killed.LoadOrStore(p.N, true); !loaded {
						pid := job.Tx().Conn().PgConn().PID()
						if _, err := b.gen.TerminateBackend(ctx, int32(pid)); err != nil {
							return err
						}
					}
				case p.N%7 == 0 && job.Attempt == 1:
					if _, loaded := failed.LoadOrStore(p.N, true); !loaded {
						return errors.New("first attempt fails")
					}
				case p.N%11 == 0 && job.Snoozes == 0:
					return runtime.Snooze(2 * time.Millisecond)
				}
				return nil
			}
			cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{"race": {Mode: mode, Concurrency: 4}}}
			reg := runtime.Registration{Kind: "racing", Queue: "race", Handler: handler, Backoff: fastRetry}
			n := 0
			batch := func(size int) []runtime.JobID {
				var reqs []runtime.EnqueueRequest
				for range size {
					n++
					key := keyOf(n)
					r := runtime.EnqueueRequest{Kind: "racing", Payload: mustJSON(t, map[string]any{"n": n})}
					r.Apply(runtime.WithQueue("race"), runtime.WithLimit(key, limits[key]))
					reqs = append(reqs, r)
				}
				ids, err := runtime.EnqueueMany(ctx, b.pool, reqs)
				if err != nil {
					t.Fatal(err)
				}
				return ids
			}
			ids := batch(300)

			samples := 0
			var bad []string
			stop := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				for {
					select {
					case <-stop:
						return
					case <-time.After(2 * time.Millisecond):
					}
					rows, err := b.q.LimitSlots(ctx, "race")
					if err != nil {
						bad = append(bad, err.Error())
						return
					}
					samples++
					for _, r := range rows {
						if sum := r.Started + r.Queued + int64(r.Free) + r.Noted; sum != int64(r.MaxRunning) {
							bad = append(bad, fmt.Sprintf("key %q: %d started and %d queued admitted, %d free, %d noted: %d slots, limit %d",
								r.LimitKey, r.Started, r.Queued, r.Free, r.Noted, sum, r.MaxRunning))
						}
						if r.LimitKey == "one" && r.Started > 1 {
							bad = append(bad, fmt.Sprintf("key %q: %d admitted jobs started, limit 1", r.LimitKey, r.Started))
						}
					}
				}
			}()
			for range 3 {
				startWorker(t, b.url, cfg, reg)
			}
			for range 4 {
				time.Sleep(30 * time.Millisecond)
				ids = append(ids, batch(60)...)
			}
			if _, err := runtime.SetLimit(ctx, b.pool, "race", "few", 2); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, batch(60)...)
			time.Sleep(100 * time.Millisecond)
			if _, err := runtime.SetLimit(ctx, b.pool, "race", "few", 0); err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				b.waitStatus(t, id, 30*time.Second, testdb.PgtaskJobStatusSucceeded)
			}
			// Handlers running at once, counted in them: the key of limit 1
			// never runs two, the key of limit 3 (2 for a while, with the
			// jobs already running going on) never more than 3.
			if got := gauge.mostOf("one"); got > 1 {
				t.Errorf("%d handlers of key \"one\" ran at once, over its limit of 1", got)
			}
			if got := gauge.mostOf("few"); got > 3 {
				t.Errorf("%d handlers of key \"few\" ran at once, over its limit of 3", got)
			}
			close(stop)
			<-sampled
			if len(bad) > 0 {
				t.Fatalf("%d of %d samples wrong, first: %s", len(bad), samples, strings.Join(bad[:min(len(bad), 5)], "; "))
			}
			if samples < 50 {
				t.Fatalf("only %d samples taken", samples)
			}
			t.Logf("%d samples", samples)
			waitLimitsIdle(t, b, "race", limits)
		})
	}
}

// A batch of successes that waits for another transaction's change to one
// of its jobs gives back the slot that job holds once that change commits:
// the slot of a run's head, whose success is recorded meanwhile, passes to
// the run's next job, which the waiting batch then records as a success. The key ends
// with every slot free. A batch that judged the slot by the job's row as
// its own snapshot saw it (not admitted, before the head's success) would
// lose it for good.
func TestBatchWaitingForASlotPassedOnGivesItBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const queue = "passon"
	lim := func() runtime.JobID {
		return enqueue(t, b.pool, "lim.passon", map[string]any{}, runtime.WithQueue(queue), runtime.WithLimit("k", 2))
	}
	claim := func(tok int64, max int) []gen.ClaimJobsRow {
		t.Helper()
		rows, err := b.gen.ClaimJobs(ctx, gen.ClaimJobsParams{Queue: queue, Max: int32(max), WorkerID: 1,
			Token: pgtype.Int8{Int64: tok, Valid: true}})
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	// Two jobs take both slots as they are enqueued, and two more wait.
	first, other := lim(), lim()
	head, next := lim(), lim()
	attempt, token := map[int64]int32{}, map[int64]int64{}
	got := claim(5, 1)
	if len(got) != 1 || got[0].ID != int64(first) {
		t.Fatalf("the first claim took %+v, want job %d", got, first)
	}
	firstDone := gen.SettleJobsParams{Queue: queue}
	addSuccess(&firstDone, got[0].ID, got[0].Attempts, 5)
	if _, err := b.gen.SettleJobs(ctx, firstDone); err != nil {
		t.Fatal(err)
	}
	// The slot it gave back admits the head of the waiting two, with the
	// next in its run (started on the head's slot); the other job holds
	// the other slot.
	for _, tok := range []int64{11, 12} {
		for _, r := range claim(tok, 3) {
			attempt[r.ID], token[r.ID] = r.Attempts, tok
		}
	}
	for _, id := range []runtime.JobID{head, next, other} {
		if _, ok := attempt[int64(id)]; !ok {
			t.Fatalf("job %d was not claimed: %v", id, attempt)
		}
	}
	slots, err := b.q.LimitSlots(ctx, queue)
	if err != nil || len(slots) != 1 || slots[0].Free != 0 || slots[0].Started != 2 {
		t.Fatalf("after the claim: %+v, %v; want both slots taken by two started jobs", slots, err)
	}

	// The head's success is recorded alone, in a transaction left open:
	// its slot passes to the next job of its run, whose row that
	// transaction holds.
	op := beginTx(t, b)
	headDone := gen.SettleJobsParams{Queue: queue}
	addSuccess(&headDone, int64(head), attempt[int64(head)], token[int64(head)])
	if r, err := gen.New(op).SettleJobs(ctx, headDone); err != nil || r.Recorded != 1 {
		t.Fatalf("record job %d's success: %+v, %v", head, r, err)
	}
	if n, err := testdb.New(op).GetJob(ctx, int64(next)); err != nil || !n.IsHead {
		t.Fatalf("job %d after its run's head succeeded: head %v, %v; want the head's slot passed to it", next, n.IsHead, err)
	}
	settler, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer settler.Release()
	spid := int32(settler.Conn().PgConn().PID())
	done := make(chan error, 1)
	go func() {
		p := gen.SettleJobsParams{Queue: queue}
		for _, id := range []runtime.JobID{next, other} {
			addSuccess(&p, int64(id), attempt[int64(id)], token[int64(id)])
		}
		r, err := gen.New(settler).SettleJobs(ctx, p)
		if err == nil && r.Recorded != 2 {
			err = fmt.Errorf("recorded %d of 2", r.Recorded)
		}
		done <- err
	}()
	oppid, err := testdb.New(op).BackendPID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		k, err := b.q.CountBlockedBy(ctx, oppid)
		if err != nil {
			t.Fatal(err)
		}
		if k > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the batch (session %d) never waited for the hand-back", spid)
		}
	}
	if err := op.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	slots, err = b.q.LimitSlots(ctx, queue)
	if err != nil || len(slots) != 1 {
		t.Fatalf("limit keys: %+v, %v", slots, err)
	}
	if s := slots[0]; s.Free+int32(s.Started)+int32(s.Queued)+int32(s.Noted) != 2 {
		t.Fatalf("key k of limit 2 after the race: %+v; its slots do not add up to 2", s)
	}
}
