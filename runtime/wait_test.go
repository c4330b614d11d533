package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
	"github.com/pgtask/pgtask/runtime/taskspec"
)

type square struct {
	N int `json:"n"`
}

// What the generator writes for a TaskWithResult[int] task.
var squareSpec = &taskspec.Spec[square]{Kind: "square"}

// squareWorker runs squareSpec's handler on the default queue, configured
// as qc: n*n, or a final failure naming n when n is a multiple of 10.
func squareWorker(t *testing.T, url string, qc runtime.QueueConfig) {
	t.Helper()
	_, stop := newWorkerWith(t, url, runtime.Config{Queues: map[string]runtime.QueueConfig{
		runtime.DefaultQueue: qc,
	}}, func(w *runtime.Worker) error {
		return taskspec.HandleWithResult(w, squareSpec, func(_ context.Context, _ *runtime.Job, s square) (int, error) {
			if s.N%10 == 0 {
				return 0, runtime.NoRetry(fmt.Errorf("no square for %d", s.N))
			}
			return s.N * s.N, nil
		})
	})
	t.Cleanup(stop)
}

// A thousand waiters, one per job, wake as their jobs finish, succeeded or
// failed, by notification: with polling turned off, a waiter that no
// notification reaches would wait until its context ends. Outcomes are
// recorded one at a time (BatchSize 1, and lease mode) or many together.
func TestWaitResultWakesOnFinish(t *testing.T) {
	defer runtime.SetWaitPollInterval(time.Hour)()
	for name, qc := range map[string]runtime.QueueConfig{
		"held one at a time": {Concurrency: 2, BatchSize: 1},
		"held in batches":    {Concurrency: 2},
		"lease":              {Mode: runtime.ModeLease, Concurrency: 20},
	} {
		t.Run(name, func(t *testing.T) { testWaitResultWakesOnFinish(t, qc) })
	}
}

func testWaitResultWakesOnFinish(t *testing.T, qc runtime.QueueConfig) {
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 1000
	jobs := make([]square, n)
	for i := range jobs {
		jobs[i] = square{N: i + 1}
	}
	ids, err := taskspec.EnqueueMany(ctx, b.pool, squareSpec, jobs)
	if err != nil {
		t.Fatal(err)
	}

	type answer struct {
		value int
		err   error
		at    time.Time
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := taskspec.WaitResult[int](ctx, b.pool, squareSpec, id)
			answers[i] = answer{v, err, time.Now()}
		}()
	}
	time.Sleep(500 * time.Millisecond) // the waiters look before any job runs
	started := time.Now()
	squareWorker(t, b.url, qc)
	wg.Wait()

	infos, err := runtime.GetJobs(context.Background(), b.pool, ids)
	if err != nil {
		t.Fatal(err)
	}
	var lastFinish, lastAnswer time.Time
	for i, a := range answers {
		want := (i + 1) * (i + 1)
		if (i+1)%10 == 0 {
			var fe *runtime.JobFailedError
			if !errors.Is(a.err, runtime.ErrJobFailed) || !errors.As(a.err, &fe) ||
				fe.Status != runtime.StatusFailed || fe.LastError != fmt.Sprintf("no square for %d", i+1) {
				t.Fatalf("job %d: WaitResult = %v, %v; want a failure with its last error", ids[i], a.value, a.err)
			}
		} else if a.err != nil || a.value != want {
			t.Fatalf("job %d: WaitResult = %v, %v; want %d", ids[i], a.value, a.err, want)
		}
		if f := *infos[i].FinishedAt; f.After(lastFinish) {
			lastFinish = f
		}
		if a.at.After(lastAnswer) {
			lastAnswer = a.at
		}
	}
	work := lastFinish.Sub(started)
	late := lastAnswer.Sub(lastFinish)
	t.Logf("the worker took %v for %d jobs; the last waiter returned %v after the last finish", work, n, late)
	if late > max(work, time.Second) {
		t.Errorf("the last waiter returned %v after the last job finished; the worker took %v for all", late, work)
	}
}

// A job an operator cancels sends no notification; polling finds it.
func TestWaitResultOfACancelledJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id, err := taskspec.Enqueue(ctx, b.pool, squareSpec, square{N: 3})
	if err != nil {
		t.Fatal(err)
	}
	// The cancel has a context of its own, and the test waits for it: the
	// waiter may see the cancellation commit before CancelJob returns.
	cancelled := make(chan error, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		_, err := runtime.CancelJob(context.Background(), b.pool, id)
		cancelled <- err
	}()
	_, err = taskspec.WaitResult[int](ctx, b.pool, squareSpec, id)
	if cerr := <-cancelled; cerr != nil {
		t.Fatal(cerr)
	}
	var fe *runtime.JobFailedError
	if !errors.Is(err, runtime.ErrJobCancelled) || !errors.Is(err, runtime.ErrJobFailed) || !errors.As(err, &fe) ||
		fe.Status != runtime.StatusCancelled || fe.ID != id {
		t.Fatalf("WaitResult = %v; want the job's cancellation", err)
	}
}

// An operator's cancel of a job no worker holds wakes its waiter by
// notification too, as a worker's outcome does: with polling turned off, a
// waiter that no notification reaches would wait until its context ends.
func TestWaitResultWakesOnAnOperatorsCancel(t *testing.T) {
	defer runtime.SetWaitPollInterval(time.Hour)()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	queued, err := taskspec.Enqueue(ctx, b.pool, squareSpec, square{N: 3})
	if err != nil {
		t.Fatal(err)
	}
	later, err := taskspec.Enqueue(ctx, b.pool, squareSpec, square{N: 4}, runtime.WithDelay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for _, id := range []runtime.JobID{queued, later} {
		go func() {
			_, err := taskspec.WaitResult[int](ctx, b.pool, squareSpec, id)
			errs <- err
		}()
	}
	time.Sleep(300 * time.Millisecond) // the waiters listen
	for _, id := range []runtime.JobID{queued, later} {
		if ok, err := runtime.CancelJob(ctx, b.pool, id); err != nil || !ok {
			t.Fatalf("CancelJob(%d): %v, %v; want it cancelled", id, ok, err)
		}
	}
	for range 2 {
		if err := <-errs; !errors.Is(err, runtime.ErrJobCancelled) {
			t.Errorf("WaitResult = %v; want the job's cancellation before the context ends", err)
		}
	}
}

// Waiting ends with the context, and at once for an id with no job.
func TestWaitResultEndsWithItsContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, err := taskspec.Enqueue(context.Background(), b.pool, squareSpec, square{N: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := taskspec.WaitResult[int](ctx, b.pool, squareSpec, id); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitResult of a job no worker runs = %v; want the context's deadline", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("WaitResult returned %v after its context ended", took-300*time.Millisecond)
	}
	if _, err := taskspec.WaitResult[int](context.Background(), b.pool, squareSpec, id+1000); !errors.Is(err, runtime.ErrJobNotFound) {
		t.Fatalf("WaitResult of an id with no job = %v; want ErrJobNotFound", err)
	}
}

// Results reads every job's result, status and error in one call.
func TestResultsOfMany(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids, err := taskspec.EnqueueMany(ctx, b.pool, squareSpec, []square{{N: 4}, {N: 10}})
	if err != nil {
		t.Fatal(err)
	}
	squareWorker(t, b.url, runtime.QueueConfig{Concurrency: 1, BatchSize: 5})
	if _, err := runtime.WaitJobs(ctx, b.pool, ids); err != nil {
		t.Fatal(err)
	}
	queued, err := taskspec.Enqueue(ctx, b.pool, &taskspec.Spec[square]{Kind: "square", Defaults: runtime.EnqueueOptions{Queue: "elsewhere"}}, square{N: 5})
	if err != nil {
		t.Fatal(err)
	}
	other := enqueue(t, b.pool, "cube", square{N: 2}, runtime.WithQueue("elsewhere"))
	missing := other + 1000

	got, err := taskspec.Results[int](ctx, b.pool, squareSpec, []runtime.JobID{ids[0], ids[1], queued, missing, other})
	if err != nil {
		t.Fatal(err)
	}
	if r := got[0]; r.ID != ids[0] || r.Status != runtime.StatusSucceeded || r.Value != 16 || r.Err != nil {
		t.Errorf("succeeded job: %+v", r)
	}
	var fe *runtime.JobFailedError
	if r := got[1]; r.Status != runtime.StatusFailed || !errors.As(r.Err, &fe) || fe.LastError != "no square for 10" {
		t.Errorf("failed job: %+v", r)
	}
	if r := got[2]; r.Status != runtime.StatusQueued || !errors.Is(r.Err, runtime.ErrNoResult) {
		t.Errorf("queued job: %+v", r)
	}
	if r := got[3]; r.ID != missing || r.Status != "" || !errors.Is(r.Err, runtime.ErrJobNotFound) {
		t.Errorf("missing job: %+v", r)
	}
	if r := got[4]; r.Err == nil || errors.Is(r.Err, runtime.ErrNoResult) {
		t.Errorf("job of another kind: %+v", r)
	}
}

// A notification names jobs; it does not say they finished. A forged one
// makes a waiter look, and wait on.
func TestForgedFinishNotificationIsIgnored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, err := taskspec.Enqueue(context.Background(), b.pool, squareSpec, square{N: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			_ = b.q.Notify(ctx, testdb.NotifyParams{Channel: "pgtask_finished", Payload: fmt.Sprintf("%d", id)})
			time.Sleep(100 * time.Millisecond)
		}
	}()
	if v, err := taskspec.WaitResult[int](ctx, b.pool, squareSpec, id); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitResult of a queued job, with forged notifications = %v, %v; want the context's deadline", v, err)
	}
}

// A waiter whose listening connection is cut, so that the job's
// announcement never reaches it, finds the job finished by polling; the
// next wait listens on a new connection.
func TestWaitResultOutlivesItsListener(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids, err := taskspec.EnqueueMany(ctx, b.pool, squareSpec, []square{{N: 7}, {N: 8}})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		v   int
		err error
	}
	got := make(chan answer, 1)
	go func() {
		v, err := taskspec.WaitResult[int](ctx, b.pool, squareSpec, ids[0])
		got <- answer{v, err}
	}()
	for {
		n, err := b.q.CountListeners(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n, err := b.q.TerminateListeners(ctx); err != nil || n != 1 {
		t.Fatalf("TerminateListeners = %d, %v; want the waiters' listener ended", n, err)
	}
	squareWorker(t, b.url, runtime.QueueConfig{Concurrency: 1})
	if a := <-got; a.err != nil || a.v != 49 {
		t.Fatalf("WaitResult after its listener was cut = %v, %v; want 49", a.v, a.err)
	}
	if v, err := taskspec.WaitResult[int](ctx, b.pool, squareSpec, ids[1]); err != nil || v != 64 {
		t.Fatalf("the next WaitResult = %v, %v; want 64", v, err)
	}
}
