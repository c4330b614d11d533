package runtime_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
	"github.com/pgtask/pgtask/schema"
)

// Roles are the cluster's, not a database's: each test names its own and
// drops them when it ends. They log in with the test server's trust
// authentication, so that each is its session's user, as in production
// (a producer's own jobs are its login's).

// testRoleNames returns names of a producer, a worker and an admin role
// unique to the test.
func testRoleNames(t *testing.T) runtime.Roles {
	t.Helper()
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	prefix := "pgtask_t" + hex.EncodeToString(b[:])
	return runtime.Roles{Producer: prefix + "_producer", Worker: prefix + "_worker", Admin: prefix + "_admin"}
}

// dropRolesAtEnd drops the roles named when the test ends, before its
// database goes.
func dropRolesAtEnd(t *testing.T, b *bundle, names ...string) {
	t.Helper()
	t.Cleanup(func() {
		if _, err := runtime.DropRoles(context.Background(), b.pool, names...); err != nil {
			t.Errorf("drop the test's roles %v: %v", names, err)
		}
	})
}

// grantTestRoles creates roles for the test, grants them (as the owner, the
// test's superuser), checks that their privileges are exactly those
// pgtask.role_privileges lists, and drops them when the test ends.
func grantTestRoles(t *testing.T, b *bundle, ownJobsOnly bool) runtime.Roles {
	t.Helper()
	r := testRoleNames(t)
	r.OwnJobsOnly, r.Create = ownJobsOnly, true
	dropRolesAtEnd(t, b, r.Producer, r.Worker, r.Admin)
	if _, err := runtime.GrantRoles(context.Background(), b.pool, r); err != nil {
		t.Fatal(err)
	}
	wantNoDrift(t, b)
	return r
}

// wantNoDrift fails unless the privileges of PUBLIC and the recorded roles
// are those pgtask.role_privileges gives them, on every object it lists,
// and it lists every object.
func wantNoDrift(t *testing.T, b *bundle) {
	t.Helper()
	drift, err := b.gen.RoleGrantDrift(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range drift {
		if d.Grantee == "" {
			t.Errorf("%s: %s", d.Target, d.Problem)
			continue
		}
		t.Errorf("%s: %s, %s: %s", d.Target, d.Grantee, d.Privilege, d.Problem)
	}
}

// urlAs is url with role as its user.
func urlAs(t *testing.T, dbURL, role string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil || u.Scheme == "" {
		return dbURL + " user=" + role // keyword/value: a later one wins
	}
	u.User = url.User(role)
	return u.String()
}

// poolAs opens a pool on the test's database that logs in as role.
func poolAs(t *testing.T, b *bundle, role string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), urlAs(t, b.url, role))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(context.Background()); err != nil {
		t.Fatalf("log in as %s (the tests need the server to let roles log in without a password, as trust authentication does): %v", role, err)
	}
	return pool
}

// connAs opens a connection on the test's database that logs in as role.
func connAs(t *testing.T, b *bundle, role string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), urlAs(t, b.url, role))
	if err != nil {
		t.Fatalf("log in as %s: %v", role, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) }) //nolint:errcheck // may be closed already
	return conn
}

// wantDenied fails unless err is PostgreSQL refusing a privilege.
func wantDenied(t *testing.T, what string, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("%s: got %v, want permission denied (SQLSTATE 42501)", what, err)
	}
}

// copyRow tries to insert a row into a pgtask table directly (COPY, which
// needs the INSERT privilege): what a role that may only call functions
// must not be able to do.
func copyRow(ctx context.Context, db *pgxpool.Pool, table string, columns []string, row []any) error {
	_, err := db.CopyFrom(ctx, pgx.Identifier{"pgtask", table}, columns, pgx.CopyFromRows([][]any{row}))
	return err
}

// A job that breaks the table's checks and its group's invariants: the
// head of a group that has no row, in a running state.
var forgedJob = struct {
	columns []string
	row     []any
}{
	[]string{"queue", "kind", "group_key", "group_id", "is_head", "status", "payload", "max_attempts"},
	[]any{"", "forged", "g", int64(999), true, "started", json.RawMessage(`{}`), int32(1)},
}

// deniedLog records log lines that report a privilege the logging role
// lacks: a worker logs failures of its maintenance and leader's duties and
// carries on, so a test must look for them.
type deniedLog struct {
	mu    *sync.Mutex
	lines *[]string
}

func newDeniedLog() deniedLog { return deniedLog{mu: new(sync.Mutex), lines: new([]string)} }

func (h deniedLog) Enabled(context.Context, slog.Level) bool { return true }
func (h deniedLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h deniedLog) WithGroup(string) slog.Handler            { return h }

func (h deniedLog) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	sb.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&sb, " %s=%v", a.Key, a.Value)
		return true
	})
	if line := sb.String(); strings.Contains(line, "SQLSTATE 42501") {
		h.mu.Lock()
		*h.lines = append(*h.lines, line)
		h.mu.Unlock()
	}
	return nil
}

func (h deniedLog) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range *h.lines {
		t.Errorf("the worker was refused a privilege: %s", l)
	}
}

// A producer enqueues, through the enqueue functions only, and reads its
// own jobs; with own jobs only, nobody else's; and it changes nothing
// directly.
func TestProducerEnqueuesAndReadsOnlyItsOwnJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := grantTestRoles(t, b, true)
	producer := poolAs(t, b, r.Producer)

	theirs := enqueue(t, b.pool, "secret", map[string]string{"card": "4111"}, runtime.WithQueue("roles"))
	ids, err := runtime.EnqueueMany(ctx, producer, []runtime.EnqueueRequest{
		{Kind: "mail", Payload: mustJSON(t, map[string]int{"n": 1}), EnqueueOptions: runtime.EnqueueOptions{Queue: "roles", Group: "g"}},
		{Kind: "mail", Payload: mustJSON(t, map[string]int{"n": 2}), EnqueueOptions: runtime.EnqueueOptions{Queue: "roles", Group: "g"}},
		{Kind: "report", Payload: mustJSON(t, map[string]int{}), EnqueueOptions: runtime.EnqueueOptions{Queue: "roles"}},
	})
	if err != nil {
		t.Fatalf("a producer's EnqueueMany: %v", err)
	}
	unique := enqueue(t, producer, "mail", map[string]int{"n": 3}, runtime.WithQueue("roles"),
		runtime.WithUniqueKey("k"), runtime.WithMetadata("tenant", "7"))
	again, err := runtime.EnqueueResults(ctx, producer, []runtime.EnqueueRequest{{Kind: "mail", Payload: mustJSON(t, map[string]int{"n": 4}),
		EnqueueOptions: runtime.EnqueueOptions{Queue: "roles", UniqueKey: "k"}}})
	if err != nil || len(again) != 1 || again[0].ID != unique || !again[0].Existed {
		t.Fatalf("enqueueing unique key k again: %+v, %v; want job %d, existing", again, err, unique)
	}
	ids = append(ids, unique)
	for _, id := range ids {
		if by := b.job(t, id).EnqueuedBy; by == nil || *by != r.Producer {
			t.Errorf("job %d: enqueued_by %v, want %s", id, by, r.Producer)
		}
	}

	info, err := runtime.GetJob(ctx, producer, unique)
	if err != nil || info.Status != runtime.StatusQueued || info.Metadata["tenant"] != "7" || string(info.Payload) != `{"n": 3}` {
		t.Fatalf("the producer reading its job: %+v, %v", info, err)
	}
	if _, err := runtime.GetJob(ctx, producer, theirs); !errors.Is(err, runtime.ErrJobNotFound) {
		t.Errorf("the producer reading a job it did not enqueue: %v, want ErrJobNotFound", err)
	}
	listed, err := runtime.ListJobs(ctx, producer, runtime.JobFilter{}, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var seen []runtime.JobID
	for _, j := range listed {
		seen = append(seen, j.ID)
	}
	if !slices.Equal(seen, ids) {
		t.Errorf("the producer lists jobs %v, want its own, %v", seen, ids)
	}

	// Its results, once a worker (of the worker role) has run them.
	startWorker(t, urlAs(t, b.url, r.Worker), runtime.Config{Queues: map[string]runtime.QueueConfig{"roles": {}}},
		runtime.Registration{Kind: "mail", Handler: func(ctx context.Context, job *runtime.Job) error {
			return job.SetResult(map[string]int{"sent": job.Attempt})
		}},
		runtime.Registration{Kind: "report", Handler: func(context.Context, *runtime.Job) error { return nil }},
		runtime.Registration{Kind: "secret", Handler: func(context.Context, *runtime.Job) error { return nil }},
	)
	b.waitQueueDone(t, "roles", 10*time.Second)
	info, err = runtime.GetJob(ctx, producer, ids[0])
	if err != nil || info.Status != runtime.StatusSucceeded || string(info.Result) != `{"sent": 1}` {
		t.Fatalf("the producer reading its job's result: %+v, %v", info, err)
	}

	// What it cannot do.
	wantDenied(t, "inserting a job directly", copyRow(ctx, producer, "jobs", forgedJob.columns, forgedJob.row))
	wantDenied(t, "inserting a group directly", copyRow(ctx, producer, "queue_groups",
		[]string{"queue", "group_key"}, []any{"roles", "g"}))
	pq := testdb.New(producer)
	_, err = pq.ExpireLease(ctx, int64(ids[0]))
	wantDenied(t, "updating a job", err)
	_, err = pq.DeleteJob(ctx, int64(ids[0]))
	wantDenied(t, "deleting a job", err)
	wantDenied(t, "truncating the jobs", pq.TruncateJobs(ctx))
	_, err = pq.GetGroup(ctx, testdb.GetGroupParams{Queue: "roles", GroupKey: "g"})
	wantDenied(t, "reading the groups", err)
	g := gen.New(producer)
	_, err = g.ClaimJobs(ctx, gen.ClaimJobsParams{Queue: "roles", Max: 1, WorkerID: 1})
	wantDenied(t, "claiming", err)
	_, err = g.CompleteJobs(ctx, gen.CompleteJobsParams{Ids: []int64{int64(ids[2])}, Attempts: []int32{1}, Results: []json.RawMessage{nil}})
	wantDenied(t, "completing", err)
	_, err = g.SettleJobs(ctx, gen.SettleJobsParams{Queue: "roles", Ids: []int64{int64(ids[2])}, Attempts: []int32{1},
		Results: []json.RawMessage{nil}, Errors: []json.RawMessage{nil}, RetryInUs: []int64{0}})
	wantDenied(t, "settling", err)
	_, err = g.PromoteScheduled(ctx, 10)
	wantDenied(t, "maintenance", err)
	_, err = runtime.CancelJob(ctx, producer, ids[2])
	wantDenied(t, "cancelling", err)
	_, err = runtime.RetryJob(ctx, producer, ids[2])
	wantDenied(t, "retrying", err)
	_, err = runtime.PauseQueue(ctx, producer, "roles")
	wantDenied(t, "pausing", err)
	_, err = runtime.Stats(ctx, producer)
	wantDenied(t, "statistics", err)
	// The commands and the dashboard show a producer's job without its
	// limit, which it cannot read.
	_, err = runtime.GetJobLimit(ctx, producer, ids[2])
	wantDenied(t, "reading a job's limit", err)

	// Through the enqueue function, a row that breaks the table's checks or
	// a group's invariants is refused as from anyone.
	bad := gen.InsertJobsParams{
		Payloads: []json.RawMessage{json.RawMessage(`{}`)}, Settings: []int32{1}, Groups: []int32{1},
		Kinds: []string{"mail"}, Queues: []string{"roles"}, Priorities: []int16{0}, AgingMs: []int32{0}, MaxAttempts: []int32{1},
		FailBlocksGroup: []bool{false}, RunAt: []string{""}, DelayUs: []int64{0},
		GroupQueues: []string{"elsewhere"}, GroupKeys: []string{"g"},
	}
	if _, err := g.InsertJobs(ctx, bad); err == nil || !strings.Contains(err.Error(), "no listed group of their queue") {
		t.Errorf("enqueueing a job into a group of another queue: %v", err)
	}
	bad.GroupQueues, bad.Kinds = []string{"roles"}, []string{""}
	var pgErr *pgconn.PgError
	if _, err := g.InsertJobs(ctx, bad); !errors.As(err, &pgErr) || pgErr.ConstraintName != "jobs_kind_not_empty" {
		t.Errorf("enqueueing a job of an empty kind: %v, want jobs_kind_not_empty violated", err)
	}
}

// Without own jobs only, a producer reads every job; switching it on and
// off later takes effect, and only then locks the table.
func TestProducerReadsEveryJobUnlessOwnJobsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := grantTestRoles(t, b, false)
	producer := poolAs(t, b, r.Producer)
	theirs := enqueue(t, b.pool, "secret", map[string]int{})
	if _, err := runtime.GetJob(ctx, producer, theirs); err != nil {
		t.Fatalf("reading another's job without own jobs only: %v", err)
	}

	grant := func(own bool) []string {
		t.Helper()
		r.OwnJobsOnly, r.Create = own, false
		statements, err := runtime.GrantRoles(ctx, b.pool, r)
		if err != nil {
			t.Fatal(err)
		}
		wantNoDrift(t, b)
		return statements
	}
	if s := grant(true); !slices.Contains(s, "ALTER TABLE pgtask.jobs ENABLE ROW LEVEL SECURITY") {
		t.Errorf("switching own jobs only on ran %q, and no ENABLE ROW LEVEL SECURITY", s)
	}
	if _, err := runtime.GetJob(ctx, producer, theirs); !errors.Is(err, runtime.ErrJobNotFound) {
		t.Errorf("reading another's job with own jobs only: %v, want ErrJobNotFound", err)
	}
	if s := grant(true); slices.ContainsFunc(s, func(s string) bool { return strings.Contains(s, "POLICY") || strings.Contains(s, "ROW LEVEL") }) {
		t.Errorf("granting again what was granted touched the table's row-level security: %q", s)
	}
	if s := grant(false); !slices.Contains(s, "ALTER TABLE pgtask.jobs DISABLE ROW LEVEL SECURITY") {
		t.Errorf("switching own jobs only off ran %q, and no DISABLE ROW LEVEL SECURITY", s)
	}
	if _, err := runtime.GetJob(ctx, producer, theirs); err != nil {
		t.Errorf("reading another's job after own jobs only was switched off: %v", err)
	}
}

// A worker of the worker role works jobs in both modes, with retries,
// groups in order, results, and the rescue of a session it abandons (it
// ends its own session); row-level security (own jobs only) does not hide
// jobs from it.
func TestWorkerRoleWorksJobsInBothModes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := grantTestRoles(t, b, true)
	producer := poolAs(t, b, r.Producer)
	log := newDeniedLog()

	var mu sync.Mutex
	ran := map[string][]int{}
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	regs := []runtime.Registration{stubbornOnce(release)}
	for _, mode := range []string{"held", "lease"} {
		regs = append(regs,
			runtime.Registration{Kind: mode + "_ok", Queue: mode, Handler: func(ctx context.Context, job *runtime.Job) error {
				if err := job.ReportProgress(ctx, 50, mode); err != nil {
					return err
				}
				return job.SetResult(map[string]string{"mode": mode})
			}},
			runtime.Registration{Kind: mode + "_flaky", Queue: mode, Backoff: fastRetry, Handler: func(ctx context.Context, job *runtime.Job) error {
				if job.Attempt == 1 {
					return errors.New("not yet")
				}
				return nil
			}},
			runtime.Registration{Kind: mode + "_never", Queue: mode, Handler: func(ctx context.Context, job *runtime.Job) error {
				return runtime.NoRetry(errors.New("never"))
			}},
			runtime.Registration{Kind: mode + "_seq", Queue: mode, Handler: func(ctx context.Context, job *runtime.Job) error {
				var p struct{ N int }
				if err := json.Unmarshal(job.Payload, &p); err != nil {
					return err
				}
				mu.Lock()
				ran[mode] = append(ran[mode], p.N)
				mu.Unlock()
				return nil
			}},
		)
	}
	startWorker(t, urlAs(t, b.url, r.Worker), runtime.Config{
		Logger:       slog.New(log),
		AbandonGrace: 200 * time.Millisecond,
		Queues: map[string]runtime.QueueConfig{
			runtime.DefaultQueue: {},
			"held":               {Mode: runtime.ModeHeld, BatchSize: 5},
			"lease":              {Mode: runtime.ModeLease},
		},
	}, regs...)

	stubborn := enqueue(t, producer, "stubborn", map[string]int{})
	type want struct {
		id     runtime.JobID
		status runtime.Status
	}
	var wants []want
	for _, mode := range []string{"held", "lease"} {
		q := runtime.WithQueue(mode)
		wants = append(wants,
			want{enqueue(t, producer, mode+"_ok", map[string]int{}, q), runtime.StatusSucceeded},
			want{enqueue(t, producer, mode+"_flaky", map[string]int{}, q), runtime.StatusSucceeded},
			want{enqueue(t, producer, mode+"_never", map[string]int{}, q), runtime.StatusFailed},
			want{enqueue(t, producer, mode+"_ok", map[string]int{}, q, runtime.WithDelay(100*time.Millisecond)), runtime.StatusSucceeded},
		)
		for n := 1; n <= 5; n++ {
			wants = append(wants, want{enqueue(t, producer, mode+"_seq", map[string]int{"N": n}, q, runtime.WithGroup("g")), runtime.StatusSucceeded})
		}
		// Rate-limited: claims take tokens; a retry waits for one again.
		rate := runtime.WithRate("r", 50, time.Second)
		wants = append(wants,
			want{enqueue(t, producer, mode+"_ok", map[string]int{}, q, rate), runtime.StatusSucceeded},
			want{enqueue(t, producer, mode+"_flaky", map[string]int{}, q, rate), runtime.StatusSucceeded},
		)
	}
	for _, mode := range []string{"held", "lease"} {
		b.waitQueueDone(t, mode, 15*time.Second)
	}
	for _, w := range wants {
		info, err := runtime.GetJob(ctx, producer, w.id)
		if err != nil || info.Status != w.status {
			t.Errorf("job %d (%v): %v, want %s", w.id, info, err, w.status)
		}
		if err == nil && info.Kind == "lease_ok" && string(info.Result) != `{"mode": "lease"}` {
			t.Errorf("job %d: result %s", w.id, info.Result)
		}
		if err == nil && strings.HasSuffix(info.Kind, "_ok") {
			if p, err := runtime.GetJobProgress(ctx, b.pool, w.id); err != nil || p == nil || p.Message != info.Queue {
				t.Errorf("job %d: progress %+v, %v", w.id, p, err)
			}
			_, err := runtime.GetJobProgress(ctx, producer, w.id)
			wantDenied(t, "a producer reading progress", err)
		}
	}
	mu.Lock()
	for _, mode := range []string{"held", "lease"} {
		if !slices.Equal(ran[mode], []int{1, 2, 3, 4, 5}) {
			t.Errorf("%s mode ran the group's jobs in the order %v", mode, ran[mode])
		}
	}
	mu.Unlock()

	j := b.waitStatus(t, stubborn, 15*time.Second, testdb.PgtaskJobStatusSucceeded)
	if e := errorsOf(t, j); j.Attempts != 2 || len(e) != 1 || !strings.Contains(e[0].Error, "abandoned") {
		t.Errorf("the abandoned job: attempts %d, errors %s; want its session ended by the worker and a second attempt", j.Attempts, j.Errors)
	}
	log.check(t)
}

// The worker role's leader duties (periodic jobs, retention) and its
// answers to an admin: cancelling a running job, leaving a paused queue.
func TestWorkerRoleLeadsAndAnswersAdmins(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := grantTestRoles(t, b, true)
	admin := poolAs(t, b, r.Admin)
	log := newDeniedLog()

	ticks := make(chan runtime.JobID, 1)
	started := make(chan runtime.JobID, 1)
	_, stop := newWorkerWith(t, urlAs(t, b.url, r.Worker), runtime.Config{
		Logger:    slog.New(log),
		Retention: runtime.Retention{Succeeded: time.Millisecond, Interval: 50 * time.Millisecond},
	}, func(w *runtime.Worker) error {
		err := w.RegisterPeriodic(runtime.PeriodicJob{Name: "tick", Schedule: "@every 1s",
			Enqueue: func(ctx context.Context, tx runtime.DB, tick time.Time) error {
				_, err := runtime.Enqueue(ctx, tx, runtime.EnqueueRequest{Kind: "tick", Payload: json.RawMessage(`{}`)})
				return err
			}})
		return errors.Join(err,
			w.Register(runtime.Registration{Kind: "tick", Handler: func(ctx context.Context, job *runtime.Job) error {
				select {
				case ticks <- job.ID:
				default:
				}
				return nil
			}}),
			w.Register(runtime.Registration{Kind: "long", Handler: func(ctx context.Context, job *runtime.Job) error {
				started <- job.ID
				<-ctx.Done()
				return context.Cause(ctx)
			}}))
	})
	t.Cleanup(stop)

	// The leader enqueues the periodic job's ticks; they run, and
	// retention deletes them once they succeeded.
	var tick runtime.JobID
	select {
	case tick = <-ticks:
	case <-time.After(10 * time.Second):
		t.Fatal("no tick of the periodic job ran in 10s")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, err := runtime.GetJob(ctx, admin, tick)
		if errors.Is(err, runtime.ErrJobNotFound) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("tick %d: %v; want it deleted by retention", tick, err)
		}
	}

	// An admin cancels a running job; its worker stops the handler.
	long := enqueue(t, b.pool, "long", map[string]int{})
	if id := <-started; id != long {
		t.Fatalf("started job %d, want %d", id, long)
	}
	if ok, err := runtime.CancelJob(ctx, admin, long); err != nil || !ok {
		t.Fatalf("an admin cancelling a running job: %v, %v", ok, err)
	}
	b.waitStatus(t, long, 10*time.Second, testdb.PgtaskJobStatusCancelled)

	// An admin pauses the queue: nothing runs until it resumes it.
	if ok, err := runtime.PauseQueue(ctx, admin, runtime.DefaultQueue); err != nil || !ok {
		t.Fatalf("an admin pausing a queue: %v, %v", ok, err)
	}
	held := enqueue(t, b.pool, "tick", map[string]int{})
	time.Sleep(500 * time.Millisecond)
	if j := b.job(t, held); j.Status != testdb.PgtaskJobStatusQueued {
		t.Fatalf("a job of a paused queue is %s", j.Status)
	}
	if ok, err := runtime.ResumeQueue(ctx, admin, runtime.DefaultQueue); err != nil || !ok {
		t.Fatalf("an admin resuming a queue: %v, %v", ok, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, err := runtime.GetJob(ctx, admin, held)
		if errors.Is(err, runtime.ErrJobNotFound) || (err == nil && info.Status == runtime.StatusSucceeded) {
			break // run, and maybe deleted by retention since
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("job %d of the resumed queue: %+v, %v; want it run", held, info, err)
		}
	}
	log.check(t)
}

// Workers of the worker role rescue each other's jobs: a dead worker's
// held-mode job (its sessions are gone), and a leased job whose lease ran
// out while its worker lives.
func TestWorkerRoleRescuesOtherWorkersJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := grantTestRoles(t, b, false)
	const dead, hung, alive = 7, 8, 9
	held := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithQueue("held"))
	leased := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithQueue("lease"))

	// A worker's session claims a job, then the worker dies.
	claimer := connAs(t, b, r.Worker)
	cq := gen.New(claimer)
	if err := cq.LockWorker(ctx, dead); err != nil {
		t.Fatal(err)
	}
	rows, err := cq.ClaimJobs(ctx, gen.ClaimJobsParams{Queue: "held", Max: 1, WorkerID: dead})
	if err != nil || len(rows) != 1 || rows[0].ID != int64(held) {
		t.Fatalf("claim as the worker role: %v, %v", rows, err)
	}
	pid := int32(claimer.PgConn().PID())
	if err := claimer.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitGone(t, b, pid)

	// Another worker claims a job with a lease, and lives on, hung.
	lq := gen.New(connAs(t, b, r.Worker))
	if err := lq.LockWorker(ctx, hung); err != nil {
		t.Fatal(err)
	}
	leases, err := lq.ClaimLeasedJobs(ctx, gen.ClaimLeasedJobsParams{Queue: "lease", Max: 1, WorkerID: hung, LeaseMs: 60000, Token: 1})
	if err != nil || len(leases) != 1 || leases[0].ID != int64(leased) {
		t.Fatalf("leased claim as the worker role: %v, %v", leases, err)
	}

	rescuer := gen.New(connAs(t, b, r.Worker))
	if err := rescuer.LockWorker(ctx, alive); err != nil {
		t.Fatal(err)
	}
	rescued, err := rescuer.RescueOrphans(ctx, gen.RescueOrphansParams{Max: 10, WorkerID: alive})
	if err != nil || !slices.Equal(rescued, []int64{int64(held)}) {
		t.Fatalf("rescue as the worker role: %v, %v; want [%d]", rescued, err, held)
	}
	if j := b.job(t, held); j.Status != testdb.PgtaskJobStatusQueued || j.Attempts != 1 {
		t.Fatalf("the rescued job is %s after %d attempts", j.Status, j.Attempts)
	}
	if n, err := b.q.ExpireLease(ctx, int64(leased)); err != nil || n != 1 {
		t.Fatalf("expire the lease: %d, %v", n, err)
	}
	expired, err := rescuer.ExpireLeases(ctx, gen.ExpireLeasesParams{Max: 10, WorkerID: alive})
	if err != nil || !slices.Equal(expired, []int64{int64(leased)}) {
		t.Fatalf("take over an expired lease as the worker role: %v, %v", expired, err)
	}

	// The operators' functions are not the worker's (but cancel_job, with
	// which its maintenance carries out their cancel requests).
	worker := poolAs(t, b, r.Worker)
	_, err = runtime.RetryJob(ctx, worker, held)
	wantDenied(t, "a worker retrying", err)
	_, err = runtime.DeleteJobs(ctx, worker, runtime.JobFilter{}, nil)
	wantDenied(t, "a worker deleting jobs", err)
	_, err = runtime.PauseQueue(ctx, worker, "held")
	wantDenied(t, "a worker pausing", err)
	_, err = runtime.GrantRoles(ctx, worker, runtime.Roles{Producer: r.Worker})
	wantDenied(t, "a worker granting roles", err)
}

// An admin runs operations on jobs and queues, and nothing else.
func TestAdminRoleRunsOperationsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := grantTestRoles(t, b, true)
	admin := poolAs(t, b, r.Admin)
	q := runtime.WithQueue("ops")
	a := enqueue(t, b.pool, "mail", map[string]int{"n": 1}, q, runtime.WithGroup("g"))
	enqueue(t, b.pool, "mail", map[string]int{"n": 2}, q, runtime.WithGroup("g"))
	enqueue(t, b.pool, "report", map[string]int{}, q)

	if info, err := runtime.GetJob(ctx, admin, a); err != nil || string(info.Payload) != `{"n": 1}` {
		t.Fatalf("an admin reading a job: %+v, %v", info, err)
	}
	if p, err := runtime.GetJobProgress(ctx, admin, a); err != nil || p != nil {
		t.Fatalf("an admin reading a job's progress: %+v, %v", p, err)
	}
	if n, err := runtime.CountJobs(ctx, admin, runtime.JobFilter{Queue: "ops"}); err != nil || n != 3 {
		t.Fatalf("an admin counting jobs: %d, %v", n, err)
	}
	if jobs, err := runtime.ListJobs(ctx, admin, runtime.JobFilter{Queue: "ops"}, 0, 10); err != nil || len(jobs) != 3 {
		t.Fatalf("an admin listing jobs: %d, %v", len(jobs), err)
	}
	stats, err := runtime.Stats(ctx, admin)
	if err != nil || len(stats) != 1 || stats[0].Queue != "ops" {
		t.Fatalf("an admin's statistics: %+v, %v", stats, err)
	}
	if ok, err := runtime.CancelJob(ctx, admin, a); err != nil || !ok {
		t.Fatalf("an admin cancelling a group's head: %v, %v", ok, err)
	}
	if ok, err := runtime.RetryJob(ctx, admin, a); err != nil || !ok {
		t.Fatalf("an admin retrying a cancelled job: %v, %v", ok, err)
	}
	all := runtime.JobFilter{Queue: "ops"}
	if n, err := runtime.CancelJobs(ctx, admin, all, nil); err != nil || n != 3 {
		t.Fatalf("an admin cancelling jobs: %d, %v", n, err)
	}
	if n, err := runtime.RetryJobs(ctx, admin, all, nil); err != nil || n != 3 {
		t.Fatalf("an admin retrying jobs: %d, %v", n, err)
	}
	if n, err := runtime.CancelJobs(ctx, admin, all, nil); err != nil || n != 3 {
		t.Fatalf("an admin cancelling jobs again: %d, %v", n, err)
	}
	if n, err := runtime.DeleteJobs(ctx, admin, all, nil); err != nil || n != 3 {
		t.Fatalf("an admin deleting jobs: %d, %v", n, err)
	}
	if ok, err := runtime.PauseQueue(ctx, admin, "ops"); err != nil || !ok {
		t.Fatalf("an admin pausing a queue: %v, %v", ok, err)
	}
	if paused, err := runtime.PausedQueues(ctx, admin); err != nil || len(paused) != 1 {
		t.Fatalf("an admin listing paused queues: %v, %v", paused, err)
	}
	if ok, err := runtime.ResumeQueue(ctx, admin, "ops"); err != nil || !ok {
		t.Fatalf("an admin resuming a queue: %v, %v", ok, err)
	}
	// Concurrency limits: read, set and cleared (pgtask limits).
	limited := enqueue(t, b.pool, "mail", map[string]int{}, runtime.WithQueue("ops-limited"), runtime.WithLimit("k", 1))
	if n, err := runtime.SetLimit(ctx, admin, "ops-limited", "k", 2); err != nil || n != 1 {
		t.Fatalf("an admin setting a key's limit: %d, %v", n, err)
	}
	if n, err := runtime.SetEveryKeyLimit(ctx, admin, "ops-limited", 3); err != nil || n != 0 {
		t.Fatalf("an admin setting every key's limit: %d, %v", n, err)
	}
	if infos, err := runtime.Limits(ctx, admin, "ops-limited", 0); err != nil || len(infos) != 1 || infos[0].Limit != 2 || !infos[0].Overridden {
		t.Fatalf("an admin listing limits: %+v, %v", infos, err)
	}
	if o, err := runtime.LimitOverrides(ctx, admin, "ops-limited"); err != nil || len(o) != 2 || !o[0].EveryKey || o[1].Key != "k" {
		t.Fatalf("an admin listing operators' limits: %+v, %v", o, err)
	}
	if l, err := runtime.GetJobLimit(ctx, admin, limited); err != nil || l == nil || l.Key != "k" || !l.Admitted {
		t.Fatalf("an admin reading a job's limit: %+v, %v", l, err)
	}
	if n, err := runtime.SetLimit(ctx, admin, "ops-limited", "k", 0); err != nil || n != 1 {
		t.Fatalf("an admin clearing a key's limit: %d, %v", n, err)
	}
	// Rate limits: set, read and cleared (pgtask rates); an operator's
	// retry of a rate-limited job marks its key ready through a trigger
	// that runs as the admin.
	rated := enqueue(t, b.pool, "mail", map[string]int{}, runtime.WithQueue("ops-rated"), runtime.WithRate("k", 1, time.Hour))
	if n, err := runtime.SetRate(ctx, admin, "ops-rated", "k", 10, time.Second, 2); err != nil || n != 1 {
		t.Fatalf("an admin setting a key's rate: %d, %v", n, err)
	}
	if infos, err := runtime.Rates(ctx, admin, "ops-rated", 0); err != nil || len(infos) != 1 || infos[0].Rate != 10 || !infos[0].Overridden ||
		infos[0].Waiting != 1 {
		t.Fatalf("an admin listing rates: %+v, %v", infos, err)
	}
	ratedQueue := runtime.JobFilter{Queue: "ops-rated"}
	if n, err := runtime.CancelJobs(ctx, admin, ratedQueue, nil); err != nil || n != 1 {
		t.Fatalf("an admin cancelling a rate-limited job: %d, %v", n, err)
	}
	if n, err := runtime.RetryJobs(ctx, admin, ratedQueue, nil); err != nil || n != 1 {
		t.Fatalf("an admin retrying a rate-limited job: %d, %v", n, err)
	}
	if j := b.job(t, rated); j.Status != testdb.PgtaskJobStatusQueued || j.IsHead {
		t.Fatalf("the rate-limited job after an admin's retry: %s, head %v; want queued, waiting for a token", j.Status, j.IsHead)
	}
	if n, err := runtime.SetRate(ctx, admin, "ops-rated", "k", 0, 0, 0); err != nil || n != 1 {
		t.Fatalf("an admin clearing a key's rate: %d, %v", n, err)
	}

	_, err = runtime.Enqueue(ctx, admin, runtime.EnqueueRequest{Kind: "mail", Payload: json.RawMessage(`{}`)})
	wantDenied(t, "an admin enqueueing", err)
	wantDenied(t, "an admin inserting a job directly", copyRow(ctx, admin, "jobs", forgedJob.columns, forgedJob.row))
	wantDenied(t, "an admin truncating the jobs", testdb.New(admin).TruncateJobs(ctx))
	_, err = gen.New(admin).ClaimJobs(ctx, gen.ClaimJobsParams{Queue: "ops", Max: 1, WorkerID: 1})
	wantDenied(t, "an admin claiming", err)
	_, err = gen.New(admin).PromoteScheduled(ctx, 10)
	wantDenied(t, "an admin running maintenance", err)
	_, err = runtime.Migrate(ctx, admin)
	wantDenied(t, "an admin migrating", err)
	_, err = runtime.GrantRoles(ctx, admin, runtime.Roles{Producer: r.Admin})
	wantDenied(t, "an admin granting roles", err)
}

// A role that is given no part can do nothing with pgtask, nor can PUBLIC:
// here a role that was the producer, and is no longer once another is
// granted in its place.
func TestRoleWithoutAPartCanDoNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	former := testRoleNames(t).Producer
	dropRolesAtEnd(t, b, former)
	if _, err := runtime.GrantRoles(ctx, b.pool, runtime.Roles{Producer: former, Create: true}); err != nil {
		t.Fatal(err)
	}
	pool := poolAs(t, b, former)
	id := enqueue(t, pool, "mail", map[string]int{})
	r := grantTestRoles(t, b, false)
	if r.Producer == former {
		t.Fatal("the same role twice")
	}

	_, err := runtime.Enqueue(ctx, pool, runtime.EnqueueRequest{Kind: "mail", Payload: json.RawMessage(`{}`)})
	wantDenied(t, "enqueueing", err)
	_, err = runtime.GetJob(ctx, pool, id)
	wantDenied(t, "reading a job", err)
	_, err = gen.New(pool).ClaimJobs(ctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: 1})
	wantDenied(t, "claiming", err)
	_, err = runtime.CancelJob(ctx, pool, id)
	wantDenied(t, "cancelling", err)
	_, err = runtime.PauseQueue(ctx, pool, runtime.DefaultQueue)
	wantDenied(t, "pausing", err)
	_, err = runtime.Stats(ctx, pool)
	wantDenied(t, "statistics", err)
	// wantNoDrift (in grantTestRoles) found no privilege of PUBLIC's.
}

// A function a later revision of a function file creates is PUBLIC's to
// run, and none of the roles': Migrate grants again, so that it is the
// worker's only.
func TestMigrateGrantsNewFunctionsToTheirRoles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := grantTestRoles(t, b, false)
	producer, worker := gen.New(poolAs(t, b, r.Producer)), gen.New(poolAs(t, b, r.Worker))
	extend := gen.ExtendLeasesParams{Ids: []int64{1}, Attempts: []int32{1}, Tokens: []int64{1}, LeaseMs: 1000}
	// A producer may not run it: refused at the function.
	refused := func(when string, err error, at string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "permission denied for "+at) {
			t.Fatalf("a producer extending leases %s: %v, want permission denied for %s", when, err, at)
		}
	}
	_, err := producer.ExtendLeases(ctx, extend)
	refused("at first", err, "function extend_leases")

	// The next revision of work.sql, as a release might ship it: its
	// function extend_leases created anew.
	files, err := schema.FunctionFiles()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(files, func(f schema.FunctionFile) bool { return f.Name == "work.sql" })
	next := files[i]
	next.Revision++
	next.SQL = "DROP FUNCTION pgtask.extend_leases(bigint[], integer[], bigint[], bigint);\n" + next.SQL
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runtime.ApplyFunctionFiles(ctx, tx, []schema.FunctionFile{next}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Now it may run it (PUBLIC may), and only the table stops it.
	_, err = producer.ExtendLeases(ctx, extend)
	refused("once the function was created anew", err, "table jobs")
	drift, err := b.gen.RoleGrantDrift(ctx)
	if err != nil || len(drift) == 0 {
		t.Fatalf("no drift found after the function was created anew: %v, %v", drift, err)
	}

	report, err := runtime.Migrate(ctx, b.pool)
	if err != nil {
		t.Fatal(err)
	}
	if !report.Changed() || !slices.ContainsFunc(report.Grants, func(s string) bool {
		return strings.Contains(s, "pgtask.extend_leases(bigint[],integer[],bigint[],bigint)") && strings.HasSuffix(s, "TO "+r.Worker)
	}) {
		t.Fatalf("Migrate granted %q; want extend_leases granted to %s", report.Grants, r.Worker)
	}
	wantNoDrift(t, b)
	_, err = producer.ExtendLeases(ctx, extend)
	refused("after Migrate", err, "function extend_leases")
	if _, err := worker.ExtendLeases(ctx, extend); err != nil {
		t.Fatalf("the worker extending leases after Migrate: %v", err)
	}
	if report, err := runtime.Migrate(ctx, b.pool); err != nil || report.Changed() {
		t.Fatalf("migrating again changed %+v (%v), want nothing", report, err)
	}
}

// RolesSQL prints what GrantRoles runs, and changes nothing; GrantRoles
// refuses names it must not grant to.
func TestRolesSQLPrintsWhatGrantRolesRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := testRoleNames(t)
	r.OwnJobsOnly, r.Create = true, true
	dropRolesAtEnd(t, b, r.Producer, r.Worker, r.Admin)
	printed, err := runtime.RolesSQL(ctx, b.pool, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"CREATE ROLE " + r.Producer + " LOGIN",
		"REVOKE ALL ON ALL ROUTINES IN SCHEMA pgtask FROM PUBLIC, " + r.Producer + ", " + r.Worker + ", " + r.Admin,
		"GRANT SELECT ON TABLE pgtask.jobs TO " + r.Producer,
		"CREATE POLICY pgtask_producer_own_jobs ON pgtask.jobs FOR SELECT TO " + r.Producer + " USING (enqueued_by = session_user)",
		"ALTER TABLE pgtask.jobs ENABLE ROW LEVEL SECURITY",
	} {
		if !slices.Contains(printed, want) {
			t.Errorf("RolesSQL printed no %q", want)
		}
	}
	withoutCreate := r
	withoutCreate.Create = false
	if _, err := runtime.GrantRoles(ctx, b.pool, withoutCreate); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("granting to roles RolesSQL only printed: %v, want them not to exist", err)
	}
	granted, err := runtime.GrantRoles(ctx, b.pool, r)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(granted, printed) {
		t.Errorf("GrantRoles ran\n%s\nRolesSQL printed\n%s", strings.Join(granted, "\n"), strings.Join(printed, "\n"))
	}
	wantNoDrift(t, b)

	for _, c := range []struct {
		roles runtime.Roles
		want  string
	}{
		{runtime.Roles{}, "name at least one role"},
		{runtime.Roles{Worker: "public"}, "reserved"},
		{runtime.Roles{Admin: b.pool.Config().ConnConfig.User}, "owns pgtask's schema"},
	} {
		if _, err := runtime.GrantRoles(ctx, b.pool, c.roles); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("GrantRoles(%+v): %v, want an error saying %q", c.roles, err, c.want)
		}
	}
}

// Fair queues under the roles: a producer's enqueue that names a tenant
// makes its queue fair and gives its job a turn (inside the enqueue
// functions), but only an admin makes queues fair or plain, sets weights
// and lists tenants; a worker claims a fair queue's jobs by turn and
// moves its clock, and can do none of the admin's part.
func TestRolesWorkFairQueues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := grantTestRoles(t, b, true)
	producer, worker, admin := poolAs(t, b, r.Producer), poolAs(t, b, r.Worker), poolAs(t, b, r.Admin)

	id := enqueue(t, producer, "mail", map[string]int{}, runtime.WithQueue("fair-roles"), runtime.WithTenant("acme"))
	if tenant, ok, err := runtime.JobTenant(ctx, b.pool, id); err != nil || !ok || tenant != "acme" {
		t.Fatalf("the tenant of a producer's job: %q, %v, %v; want acme", tenant, ok, err)
	}
	wantDenied(t, "a producer making a queue fair", runtime.SetFairQueue(ctx, producer, "p-fair", true))
	_, err := runtime.SetTenantWeight(ctx, producer, "fair-roles", "acme", 3)
	wantDenied(t, "a producer setting a weight", err)
	_, err = runtime.SetTenantWeight(ctx, worker, "fair-roles", "acme", 3)
	wantDenied(t, "a worker setting a weight", err)
	wantDenied(t, "a worker making a queue fair", runtime.SetFairQueue(ctx, worker, "w-fair", true))
	_, err = runtime.FairTenants(ctx, producer, "", 0)
	wantDenied(t, "a producer listing tenants", err)

	if err := runtime.SetFairQueue(ctx, admin, "ops-fair", true); err != nil {
		t.Fatalf("an admin making a queue fair: %v", err)
	}
	if _, err := runtime.SetTenantWeight(ctx, admin, "fair-roles", "acme", 3); err != nil {
		t.Fatalf("an admin setting a weight: %v", err)
	}
	if ts, err := runtime.FairTenants(ctx, admin, "fair-roles", 0); err != nil || len(ts) != 1 || ts[0].Weight != 3 || ts[0].Queued != 1 {
		t.Fatalf("an admin listing tenants: %+v, %v", ts, err)
	}
	if qs, err := runtime.FairQueues(ctx, admin); err != nil || len(qs) != 2 {
		t.Fatalf("an admin listing fair queues: %+v, %v", qs, err)
	}
	if err := runtime.SetFairQueue(ctx, admin, "ops-fair", false); err != nil {
		t.Fatalf("an admin making a queue plain: %v", err)
	}

	if _, err := gen.New(worker).AdvanceFairClocks(ctx); err != nil {
		t.Fatalf("a worker moving the fair queues' clocks: %v", err)
	}
	rows, err := gen.New(worker).ClaimJobs(ctx, gen.ClaimJobsParams{Queue: "fair-roles", Max: 5, WorkerID: 1})
	if err != nil || len(rows) != 1 || rows[0].ID != int64(id) {
		t.Fatalf("a worker claiming a fair queue: %+v, %v; want job %d", rows, err, id)
	}
}
