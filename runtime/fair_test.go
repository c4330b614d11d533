package runtime_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// tenantStarts records the order in which handlers start, across every worker
// of a test.
type tenantStarts struct {
	mu    sync.Mutex
	order []fairStart
}

type fairStart struct {
	Tenant string `json:"tenant"`
	Group  string `json:"group"`
	N      int    `json:"n"`
}

func (l *tenantStarts) add(s fairStart) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.order = append(l.order, s)
}

func (l *tenantStarts) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.order)
}

func (l *tenantStarts) all() []fairStart {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.order)
}

func (l *tenantStarts) handler(pause time.Duration) runtime.Handler {
	return func(ctx context.Context, job *runtime.Job) error {
		var s fairStart
		if err := json.Unmarshal(job.Payload, &s); err != nil {
			return err
		}
		l.add(s)
		time.Sleep(pause)
		return nil
	}
}

// enqueueTenant enqueues n jobs of tenant into queue in one statement.
func enqueueTenant(t *testing.T, b *bundle, queue, tenant string, n int, opts ...runtime.EnqueueOption) []runtime.JobID {
	t.Helper()
	reqs := make([]runtime.EnqueueRequest, n)
	for i := range reqs {
		reqs[i] = runtime.EnqueueRequest{Kind: "fair", Payload: mustJSON(t, fairStart{Tenant: tenant, N: i})}
		reqs[i].Apply(append([]runtime.EnqueueOption{runtime.WithQueue(queue), runtime.WithTenant(tenant)}, opts...)...)
	}
	ids, err := runtime.EnqueueMany(context.Background(), b.pool, reqs)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// A tenant's flood does not push another tenant's jobs behind it. Two
// workers with four handlers each work a fair queue; tenant a enqueues 5,000
// jobs, and once the workers are busy with them tenant b enqueues 50. b's
// jobs get the turns next to the ones being claimed, so they interleave
// with a's at once: before b's last job starts, a starts about as many jobs
// as b has (50, one turn each), plus those its workers had claimed
// already when b's enqueue committed (at most one batch per runner: 8 of
// BatchSize 10 in held mode, the handlers' 8 slots in lease mode). The
// bound allows that and as much again; without fairness a's whole backlog
// (over 4,000 jobs) would start first.
func TestFairQueueTenantsTakeTurns(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			log := &tenantStarts{}
			qc := runtime.QueueConfig{Mode: mode, Concurrency: 4}
			inFlight := 2 * 4
			if mode == runtime.ModeHeld {
				qc.BatchSize = 10
				inFlight = 2 * 4 * 10
			}
			cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{"fairq": qc}}
			reg := runtime.Registration{Kind: "fair", Queue: "fairq", Handler: log.handler(200 * time.Microsecond)}
			for range 2 {
				startWorker(t, b.url, cfg, reg)
			}
			enqueueTenant(t, b, "fairq", "a", 5000)
			deadline := time.Now().Add(30 * time.Second)
			for log.len() < 200 {
				if time.Now().After(deadline) {
					t.Fatalf("only %d of a's jobs started in 30s", log.len())
				}
				time.Sleep(2 * time.Millisecond)
			}
			bIDs := enqueueTenant(t, b, "fairq", "b", 50)
			at := log.len()
			for _, id := range bIDs {
				b.waitStatus(t, id, 60*time.Second, testdb.PgtaskJobStatusSucceeded)
			}
			order := log.all()
			last := -1
			for i, s := range order {
				if s.Tenant == "b" {
					last = i
				}
			}
			aAfter := 0
			for _, s := range order[at:last] {
				if s.Tenant == "a" {
					aAfter++
				}
			}
			bound := 2 * (50 + inFlight)
			t.Logf("%s: a started %d jobs after b's enqueue before b's last (bound %d)", mode, aAfter, bound)
			if aAfter > bound {
				t.Errorf("a started %d jobs after b's enqueue before b's last job started; want at most %d", aAfter, bound)
			}
		})
	}
}

// Weights: a tenant of weight 3 gets three turns for a tenant of weight 1's
// one. Both have a backlog of 600 jobs before a worker starts; of the
// first 400 jobs to start, a's share is 3/4 (300), within a tolerance of
// 30 for the first batches' rounding and the runners' interleaving.
func TestFairQueueWeights(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			if err := runtime.SetFairQueue(ctx, b.pool, "wq", true); err != nil {
				t.Fatal(err)
			}
			if _, err := runtime.SetTenantWeight(ctx, b.pool, "wq", "a", 3); err != nil {
				t.Fatal(err)
			}
			enqueueTenant(t, b, "wq", "a", 600)
			enqueueTenant(t, b, "wq", "b", 600)
			log := &tenantStarts{}
			cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{"wq": {Mode: mode, Concurrency: 2}}}
			startWorker(t, b.url, cfg, runtime.Registration{Kind: "fair", Queue: "wq", Handler: log.handler(0)})
			b.waitQueueDone(t, "wq", 60*time.Second)
			order := log.all()
			if len(order) != 1200 {
				t.Fatalf("%d jobs started, want 1200", len(order))
			}
			// Weights share out claims. A held runner runs the jobs of a
			// claim in id order, and all of a's ids are lower than b's, so
			// the handlers' start order front-loads a's jobs within each
			// batch: the share is read in claim order.
			claimed, err := b.q.TenantsInClaimOrder(ctx, "wq")
			if err != nil || len(claimed) != 1200 {
				t.Fatalf("%d jobs claimed, %v; want 1200", len(claimed), err)
			}
			a := 0
			for _, tenant := range claimed[:400] {
				if tenant == "a" {
					a++
				}
			}
			t.Logf("%s: a had %d of the first 400 claims", mode, a)
			if a < 270 || a > 330 {
				t.Errorf("a had %d of the first 400 claims; want about 300 (weights 3:1)", a)
			}
			tenants, err := runtime.FairTenants(ctx, b.pool, "wq", 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(tenants) != 1 || tenants[0].Tenant != "a" || tenants[0].Weight != 3 || tenants[0].Queued != 0 {
				t.Errorf("tenants once done: %+v, want a with weight 3 and nothing queued", tenants)
			}
		})
	}
}

// Groups keep their FIFO in a fair queue: jobs of 20 groups, each job of
// one of three tenants at random, enqueued in several statements while
// three workers run; every group's jobs start in enqueue order, one at a
// time.
func TestFairQueueGroupsKeepFIFO(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var mu sync.Mutex
			running := map[string]bool{}
			next := map[string]int{}
			var bad []string
			handler := func(ctx context.Context, job *runtime.Job) error {
				var s fairStart
				if err := json.Unmarshal(job.Payload, &s); err != nil {
					return err
				}
				mu.Lock()
				if running[s.Group] {
					bad = append(bad, fmt.Sprintf("group %s: job %d started while another ran", s.Group, s.N))
				}
				if s.N != next[s.Group] {
					bad = append(bad, fmt.Sprintf("group %s: job %d started, want %d", s.Group, s.N, next[s.Group]))
				}
				running[s.Group] = true
				next[s.Group] = s.N + 1
				mu.Unlock()
				time.Sleep(100 * time.Microsecond)
				mu.Lock()
				running[s.Group] = false
				mu.Unlock()
				return nil
			}
			cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{"fg": {Mode: mode, Concurrency: 4}}}
			for range 3 {
				startWorker(t, b.url, cfg, runtime.Registration{Kind: "fair", Queue: "fg", Handler: handler})
			}
			counts := map[string]int{}
			for round := range 10 {
				var reqs []runtime.EnqueueRequest
				for i := range 100 {
					g := fmt.Sprintf("g%d", (i*7+round)%20)
					tenant := []string{"a", "b", "c"}[(i+round)%3]
					r := runtime.EnqueueRequest{Kind: "fair", Payload: mustJSON(t, fairStart{Tenant: tenant, Group: g, N: counts[g]})}
					counts[g]++
					r.Apply(runtime.WithQueue("fg"), runtime.WithTenant(tenant), runtime.WithGroup(g))
					reqs = append(reqs, r)
				}
				if _, err := runtime.EnqueueMany(context.Background(), b.pool, reqs); err != nil {
					t.Fatal(err)
				}
				time.Sleep(3 * time.Millisecond)
			}
			jobs := b.waitQueueDone(t, "fg", 60*time.Second)
			mu.Lock()
			defer mu.Unlock()
			for _, msg := range bad {
				t.Error(msg)
			}
			for g, n := range counts {
				if next[g] != n {
					t.Errorf("group %s: %d jobs started in order, want %d", g, next[g], n)
				}
			}
			for _, j := range jobs {
				if j.Tenant == nil || !j.FairSeq.Valid {
					t.Fatalf("job %d of a fair queue has no tenant or turn", j.ID)
				}
			}
		})
	}
}

// A queue that is not fair keeps strict (priority, id) order: one handler,
// jobs of two "tenants" (named in the payload only) and two priorities
// enqueued before the worker starts, run in exactly that order, and get no
// turns.
func TestQueueWithoutFairnessKeepsOrder(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var reqs []runtime.EnqueueRequest
			for i := range 300 {
				tenant := "a"
				if i >= 250 {
					tenant = "b"
				}
				r := runtime.EnqueueRequest{Kind: "fair", Payload: mustJSON(t, fairStart{Tenant: tenant, N: i})}
				r.Apply(runtime.WithQueue("plain"), runtime.WithPriority(int16(i%2)), runtime.WithAging(runtime.StrictPriority))
				reqs = append(reqs, r)
			}
			if _, err := runtime.EnqueueMany(context.Background(), b.pool, reqs); err != nil {
				t.Fatal(err)
			}
			// Another queue's fairness does not touch this one.
			enqueueTenant(t, b, "other", "x", 5)
			log := &tenantStarts{}
			// One job per claim: a held batch's jobs that its runner hands
			// back (see QueueConfig.CommitBudget) run after later ones.
			qc := runtime.QueueConfig{Mode: mode, Concurrency: 1}
			if mode == runtime.ModeHeld {
				qc.BatchSize = 1
			}
			cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{"plain": qc}}
			startWorker(t, b.url, cfg, runtime.Registration{Kind: "fair", Queue: "plain", Handler: log.handler(0)})
			jobs := b.waitQueueDone(t, "plain", 60*time.Second)
			var want []int
			for i := 0; i < 300; i += 2 {
				want = append(want, i)
			}
			for i := 1; i < 300; i += 2 {
				want = append(want, i)
			}
			var got []int
			for _, s := range log.all() {
				got = append(got, s.N)
			}
			if !slices.Equal(got, want) {
				t.Errorf("start order %v, want (priority, id) order %v", got, want)
			}
			for _, j := range jobs {
				if j.Tenant != nil || j.FairSeq.Valid {
					t.Fatalf("job %d of a queue that is not fair has a tenant or turn", j.ID)
				}
			}
		})
	}
}

// A tenant over MaxTenantBytes is refused before anything is sent, with an
// error that names it, and nothing is enqueued.
func TestEnqueueRefusesLongTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	req := runtime.EnqueueRequest{Kind: "fair", Payload: mustJSON(t, fairStart{})}
	req.Apply(runtime.WithQueue("fairq"), runtime.WithTenant(string(make([]byte, runtime.MaxTenantBytes+1))))
	if _, err := runtime.Enqueue(context.Background(), b.pool, req); err == nil || !strings.Contains(err.Error(), "tenant") {
		t.Fatalf("a tenant of %d bytes: err %v, want one naming the tenant", runtime.MaxTenantBytes+1, err)
	}
	if qs, err := runtime.FairQueues(context.Background(), b.pool); err != nil || len(qs) != 0 {
		t.Fatalf("fair queues after a refused enqueue: %v, %v", qs, err)
	}
}

// An enqueue that makes a queue fair does not make the enqueues of other
// transactions wait for it to commit: one transaction enqueues the first
// job of a tenant into queue p and then into q, while another enqueues into
// q and then into p; neither waits for the other (nor do they deadlock), and
// once both commit both queues are fair and every job has its tenant.
func TestFairQueueFirstEnqueuesDoNotWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	enqueue := func(db runtime.DB, queue, tenant string) error {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		req := runtime.EnqueueRequest{Kind: "fair", Payload: mustJSON(t, fairStart{Tenant: tenant})}
		req.Apply(runtime.WithQueue(queue), runtime.WithTenant(tenant))
		_, err := runtime.Enqueue(cctx, db, req)
		return err
	}
	txA, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(ctx)
	txB, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txB.Rollback(ctx)
	if err := enqueue(txA, "p", "a"); err != nil {
		t.Fatal(err)
	}
	if err := enqueue(txB, "q", "b"); err != nil {
		t.Fatal(err)
	}
	// Each now enqueues into the queue the other made fair, uncommitted.
	errs := make(chan error, 2)
	go func() { errs <- enqueue(txA, "q", "a") }()
	go func() { errs <- enqueue(txB, "p", "b") }()
	first, second := <-errs, <-errs
	if err := cmp.Or(first, second); err != nil {
		t.Fatalf("an enqueue into a queue another transaction is making fair: %v", err)
	}
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := txB.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	qs, err := runtime.FairQueues(ctx, b.pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 2 || qs[0].Queue != "p" || qs[1].Queue != "q" {
		t.Fatalf("fair queues %v, want p and q", qs)
	}
	for _, queue := range []string{"p", "q"} {
		tenants, err := runtime.FairTenants(ctx, b.pool, queue, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(tenants) != 2 || tenants[0].Queued != 1 || tenants[1].Queued != 1 {
			t.Fatalf("tenants of queue %s: %+v, want a and b with a job each", queue, tenants)
		}
	}
}

// A queue that stops being fair is claimed by (priority, id) again, its
// claims starting at their cursor: the heads they scan move it, those that
// kept a turn from when the queue was fair too (only a fair queue's claims,
// which take heads by turn, leave it where it is). Were they to leave it,
// every claim would scan the claim index from the start, over the entries
// of every job claimed before, until the queue's old backlog is gone.
func TestQueueNoLongerFairMovesCursor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	enqueueTenant(t, b, "wasfair", "a", 10)
	if err := runtime.SetFairQueue(ctx, b.pool, "wasfair", false); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"held", "lease"} {
		var scanned []bool
		if mode == "held" {
			rows, err := b.gen.ClaimJobs(ctx, gen.ClaimJobsParams{Queue: "wasfair", Max: 3, WorkerID: 1})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				scanned = append(scanned, r.Scanned)
			}
		} else {
			rows, err := b.gen.ClaimLeasedJobs(ctx, gen.ClaimLeasedJobsParams{Queue: "wasfair", Max: 3, WorkerID: 1, LeaseMs: 60000})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				scanned = append(scanned, r.Scanned)
			}
		}
		if len(scanned) != 3 || slices.Contains(scanned, false) {
			t.Errorf("%s claim of a queue no longer fair: scanned %v, want 3 heads that move the cursor", mode, scanned)
		}
	}
}
