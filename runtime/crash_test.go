package runtime_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

const workerProcessEnv = "PGTASK_TEST_WORKER_PROCESS_URL"

// TestWorkerProcess is not a test: the crash tests run the test binary again
// with this test selected to get a worker in a process they can kill.
func TestWorkerProcess(t *testing.T) {
	url := os.Getenv(workerProcessEnv)
	if url == "" {
		t.Skip("helper process for the crash tests")
	}
	_, stop := newWorker(t, url, runtime.Config{Queues: map[string]runtime.QueueConfig{"crash": {Concurrency: 2}}},
		runtime.Registration{Kind: "hang", Handler: func(ctx context.Context, job *runtime.Job) error {
			<-ctx.Done()
			return ctx.Err()
		}},
		runtime.Registration{Kind: "suicide", Handler: func(ctx context.Context, job *runtime.Job) error {
			return syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}},
	)
	defer stop()
	time.Sleep(time.Minute) // until the parent kills it
}

func startWorkerProcess(t *testing.T, url string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), workerProcessEnv+"="+url)
	if testing.Verbose() {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // may be dead already
		cmd.Wait()         //nolint:errcheck // killed on purpose
	})
	return cmd
}

// A worker process killed with SIGKILL mid-handler: its job is runnable again
// within about a second, without waiting out any timeout, with the attempt
// counted; its group then goes on in order.
func TestKilledWorkerJobIsRequeuedAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hang := enqueue(t, b.pool, "hang", map[string]int{}, runtime.WithQueue("crash"), runtime.WithGroup("g"))
	after := enqueue(t, b.pool, "after", map[string]int{}, runtime.WithQueue("crash"), runtime.WithGroup("g"))

	child := startWorkerProcess(t, b.url)
	b.waitStatus(t, hang, 30*time.Second, testdb.PgtaskJobStatusStarted)
	time.Sleep(200 * time.Millisecond) // well inside the handler
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	child.Wait() //nolint:errcheck // killed on purpose

	// Something must notice: a worker in this process, maintenance only (no
	// handler for the job yet, it serves another queue).
	startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{"elsewhere": {}}})
	j := b.waitStatus(t, hang, 10*time.Second, testdb.PgtaskJobStatusQueued)
	requeued := time.Since(killed)
	t.Logf("requeued %s after SIGKILL", requeued)
	if requeued > 3*time.Second {
		t.Errorf("requeued %s after the worker died, want about a second", requeued)
	}
	if e := errorsOf(t, j); j.Attempts != 1 || len(e) != 1 || !strings.Contains(e[0].Error, "worker lost") {
		t.Fatalf("attempts=%d errors=%s", j.Attempts, j.Errors)
	}
	if !j.IsHead {
		t.Fatal("the requeued job lost its place at the head of its group")
	}

	startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{"crash": {}}},
		runtime.Registration{Kind: "hang", Handler: func(ctx context.Context, job *runtime.Job) error { return nil }},
		runtime.Registration{Kind: "after", Handler: func(ctx context.Context, job *runtime.Job) error { return nil }},
	)
	a := b.waitStatus(t, after, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	h := b.job(t, hang)
	if h.Status != testdb.PgtaskJobStatusSucceeded || h.Attempts != 2 {
		t.Fatalf("hang: %s after %d attempts", h.Status, h.Attempts)
	}
	if a.StartedAt.Before(*h.FinishedAt) {
		t.Fatalf("the next job of the group started at %s, before its head finished at %s", a.StartedAt, h.FinishedAt)
	}
}

// A job that kills its worker on every attempt ends failed after its
// attempts, instead of killing workers forever; its group moves on.
func TestPoisonJobEndsFailed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	poison := enqueue(t, b.pool, "suicide", map[string]int{}, runtime.WithQueue("crash"), runtime.WithGroup("p"), runtime.WithMaxAttempts(3))
	behind := enqueue(t, b.pool, "behind", map[string]int{}, runtime.WithQueue("crash"), runtime.WithGroup("p"))

	deaths := 0
	for deaths < 6 && b.job(t, poison).Status != testdb.PgtaskJobStatusFailed {
		child := startWorkerProcess(t, b.url)
		done := make(chan error, 1)
		go func() { done <- child.Wait() }()
		tick := time.NewTicker(50 * time.Millisecond)
		deadline := time.After(30 * time.Second)
	wait:
		for {
			select {
			case err := <-done:
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("worker process ended with %v, want killed by its poison job", err)
				}
				deaths++
				break wait
			case <-tick.C:
				// A worker that rescued the last attempt and found the job
				// out of attempts stays alive: done.
				if b.job(t, poison).Status == testdb.PgtaskJobStatusFailed {
					child.Process.Kill() //nolint:errcheck // idle worker
					<-done
					break wait
				}
			case <-deadline:
				t.Fatalf("worker process did not pick the poison job up: %+v", b.job(t, poison))
			}
		}
		tick.Stop()
	}
	// The last death is only recorded once some worker rescues it.
	startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{"crash": {}}},
		runtime.Registration{Kind: "behind", Handler: func(ctx context.Context, job *runtime.Job) error { return nil }})
	j := b.waitStatus(t, poison, 10*time.Second, testdb.PgtaskJobStatusFailed)
	if deaths != 3 || j.Attempts != 3 || len(errorsOf(t, j)) != 3 {
		t.Fatalf("deaths=%d attempts=%d errors=%s; want 3 of each", deaths, j.Attempts, j.Errors)
	}
	b.waitStatus(t, behind, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
}

// The job's database session is killed under it (pg_terminate_backend): the
// worker process lives on, the attempt is counted and the job runs again.
func TestTerminatedSessionRequeuesJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{
		Kind: "terminated",
		Handler: func(ctx context.Context, job *runtime.Job) error {
			if job.Attempt == 1 {
				pid := job.Tx().Conn().PgConn().PID()
				if _, err := b.gen.TerminateBackend(ctx, int32(pid)); err != nil {
					return err
				}
			}
			return nil
		},
	})
	id := enqueue(t, b.pool, "terminated", map[string]int{})
	j := b.waitStatus(t, id, 15*time.Second, testdb.PgtaskJobStatusSucceeded)
	if e := errorsOf(t, j); j.Attempts != 2 || len(e) != 1 || !strings.Contains(e[0].Error, "worker lost") {
		t.Fatalf("attempts=%d errors=%s", j.Attempts, j.Errors)
	}
}

// A job whose session is gone is rescued only when no session of its worker
// is left, and never by its own worker, whose rescuing session holds the
// worker's lock too (a backend's own lock does not stop its own try to take
// it exclusively). Here worker 7 claims a job on one session, which is then
// terminated; another session of worker 7 stays.
func TestRescueSparesJobsOfLiveWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const worker, other = 7, 8
	id := enqueue(t, b.pool, "k", map[string]int{})

	// Sessions of their own, outside the pool: they are ended on purpose.
	session := func() *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, b.url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) }) //nolint:errcheck // may be gone already
		if err := gen.New(c).LockWorker(ctx, worker); err != nil {
			t.Fatal(err)
		}
		return c
	}
	claimer, survivor := session(), session()
	rows, err := gen.New(claimer).ClaimJobs(ctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: worker})
	if err != nil || len(rows) != 1 || rows[0].ID != int64(id) {
		t.Fatalf("claim: %v, %v", rows, err)
	}
	owner := int32(claimer.PgConn().PID())
	if ok, err := b.gen.TerminateBackend(ctx, owner); err != nil || !ok {
		t.Fatalf("terminate the claiming session: %v, %v", ok, err)
	}
	waitGone(t, b, owner)

	rescue := func(q *gen.Queries, as int32) []int64 {
		t.Helper()
		ids, err := q.RescueOrphans(ctx, gen.RescueOrphansParams{Max: 10, WorkerID: as})
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if got := rescue(gen.New(survivor), worker); len(got) != 0 {
		t.Fatalf("worker %d's own surviving session rescued %v from it", worker, got)
	}
	if got := rescue(b.gen, other); len(got) != 0 {
		t.Fatalf("worker %d rescued %v while a session of worker %d lived", other, got, worker)
	}
	pid := int32(survivor.PgConn().PID())
	if err := survivor.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitGone(t, b, pid)
	if got := rescue(b.gen, other); len(got) != 1 || got[0] != int64(id) {
		t.Fatalf("after worker %d's last session ended, worker %d rescued %v, want [%d]", worker, other, got, id)
	}
}

// waitGone waits until the server process pid has exited.
func waitGone(t *testing.T, b *bundle, pid int32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		present, err := b.q.BackendExists(context.Background(), pid)
		if err != nil {
			t.Fatal(err)
		}
		if !present {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server process %d still there after 10s", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A claim that commits after its runner gave up on the reply leaves started
// jobs of a live worker whose session is gone: other workers leave them to
// it. The worker rescues those of its own that no runner holds, and leaves
// the ones a runner still holds (it may be running their handler). Here the
// claims are made as the worker on sessions of their own, then ended.
func TestStrandedClaimsOfALiveWorkerAreRescued(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := idleWorker(t, b.url, runtime.Config{MaintenanceInterval: 50 * time.Millisecond})
	var ran sync.Map
	if err := w.Register(runtime.Registration{Kind: "k", Handler: func(ctx context.Context, job *runtime.Job) error {
		ran.Store(job.ID, job.Attempt)
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	const strayToken, heldToken = 11, 12
	stray := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithGroup("g1"))
	held := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithGroup("g2"))
	behind := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithGroup("g1"))
	for _, c := range []struct {
		id    runtime.JobID
		token int64
	}{{stray, strayToken}, {held, heldToken}} {
		conn, err := pgx.Connect(ctx, b.url)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := gen.New(conn).ClaimJobs(ctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: w.ID(),
			Token: pgtype.Int8{Int64: c.token, Valid: true}})
		if err != nil || len(rows) != 1 || rows[0].ID != int64(c.id) {
			t.Fatalf("claim: %v, %v", rows, err)
		}
		pid := int32(conn.PgConn().PID())
		if err := conn.Close(ctx); err != nil {
			t.Fatal(err)
		}
		waitGone(t, b, pid)
	}
	w.HoldClaim(heldToken)

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	for _, id := range []runtime.JobID{stray, behind} {
		j := b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
		if id == stray {
			if e := errorsOf(t, j); j.Attempts != 2 || len(e) != 1 || !strings.Contains(e[0].Error, "worker lost") {
				t.Fatalf("stray claim's job: attempts=%d errors=%s, want its lost attempt recorded and a second", j.Attempts, j.Errors)
			}
		}
	}
	// Many maintenance rounds later, the held claim's job is still left to
	// its runner.
	time.Sleep(500 * time.Millisecond)
	if j := b.job(t, held); j.Status != testdb.PgtaskJobStatusStarted {
		t.Fatalf("the job of a claim a runner holds is %s, want it left started", j.Status)
	}
	if _, ok := ran.Load(held); ok {
		t.Fatal("the job of a claim a runner holds ran again")
	}
	w.ForgetClaim(heldToken)
	b.waitStatus(t, held, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
}
