package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// waitProgress waits until job id's progress has message and returns it.
func (b *bundle) waitProgress(t *testing.T, id runtime.JobID, message string, timeout time.Duration) *runtime.JobProgress {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p, err := runtime.GetJobProgress(context.Background(), b.pool, id)
		if err != nil {
			t.Fatal(err)
		}
		if p != nil && p.Message == message {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d: progress %+v after %s, want the message %q", id, p, timeout, message)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Progress reported while the attempt runs is seen by other sessions at
// once, in both modes, while the job's transaction, with a write of the
// handler in it, is still open; it stays when the job succeeds.
func TestProgressIsSeenWhileTheJobTransactionIsOpen(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			reported := make(chan error, 1)
			release := make(chan struct{})
			startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{
				runtime.DefaultQueue: {Mode: mode},
			}}, runtime.Registration{Kind: "long", Handler: func(ctx context.Context, job *runtime.Job) error {
				// A write in the job's transaction, which commits only
				// with the job's success.
				if _, err := runtime.Enqueue(ctx, job.Tx(), runtime.EnqueueRequest{Kind: "marker", Payload: []byte(`{}`), EnqueueOptions: runtime.EnqueueOptions{Queue: "elsewhere"}}); err != nil {
					return err
				}
				reported <- job.ReportProgressValue(ctx, 42.5, "halfway", map[string]int{"rows": 7})
				<-release
				return nil
			}})
			id := enqueue(t, b.pool, "long", map[string]int{})
			select {
			case err := <-reported:
				if err != nil {
					t.Fatalf("ReportProgressValue: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the job did not start")
			}
			p, err := runtime.GetJobProgress(ctx, b.pool, id)
			if err != nil || p == nil {
				t.Fatalf("progress while the job runs: %+v, %v", p, err)
			}
			if p.JobID != id || p.Attempt != 1 || p.Percent != 42.5 || p.Message != "halfway" || string(p.Value) != `{"rows": 7}` {
				t.Fatalf("progress while the job runs: %+v (value %s)", p, p.Value)
			}
			if markers, err := b.q.ListJobs(ctx, "elsewhere"); err != nil || len(markers) != 0 {
				t.Fatalf("the handler's write is visible before its job ended (%d, %v): the transaction was not open", len(markers), err)
			}
			if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusStarted {
				t.Fatalf("job is %s while its handler runs", j.Status)
			}
			close(release)
			b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
			if markers, err := b.q.ListJobs(ctx, "elsewhere"); err != nil || len(markers) != 1 {
				t.Fatalf("the handler's write after its success: %d, %v", len(markers), err)
			}
			after, err := runtime.GetJobProgress(ctx, b.pool, id)
			if err != nil || after == nil || after.Message != "halfway" || after.Attempt != 1 {
				t.Fatalf("progress of the finished job: %+v, %v", after, err)
			}
		})
	}
}

// In lease mode, a hung attempt whose job was taken over cannot record
// progress: the write is refused with ErrAttemptNotCurrent and the current
// attempt's progress stays.
func TestProgressOfATakenOverAttemptIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	release := make(chan struct{})
	running := make(chan struct{}, 1)
	late := make(chan error, 1)
	hung := runtime.Registration{Kind: "hangs", Handler: func(ctx context.Context, job *runtime.Job) error {
		if job.Attempt > 1 {
			return job.ReportProgress(ctx, 100, "second attempt")
		}
		if err := job.ReportProgress(ctx, 10, "first attempt"); err != nil {
			return err
		}
		running <- struct{}{}
		<-release
		late <- job.ReportProgress(ctx, 50, "stale attempt")
		return nil
	}}
	cfg := leaseConfig(4, time.Hour) // only the test makes the lease run out
	startWorker(t, b.url, cfg, hung)
	id := enqueue(t, b.pool, "hangs", map[string]int{})
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not start")
	}
	if p := b.waitProgress(t, id, "first attempt", 5*time.Second); p.Attempt != 1 {
		t.Fatalf("the first attempt's progress: %+v", p)
	}
	if n, err := b.q.ExpireLease(ctx, int64(id)); err != nil || n != 1 {
		t.Fatalf("expire the lease: %d rows, %v", n, err)
	}
	startWorker(t, b.url, cfg, hung)
	b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)

	// Past the interval since the stale attempt's last write, its next
	// report is written at once, and refused (a report within the interval
	// would be kept, and refused when the handler returns).
	time.Sleep(runtime.ProgressInterval)
	close(release)
	if err := <-late; !errors.Is(err, runtime.ErrAttemptNotCurrent) {
		t.Fatalf("the stale attempt's report: %v, want ErrAttemptNotCurrent", err)
	}
	p, err := runtime.GetJobProgress(ctx, b.pool, id)
	if err != nil || p == nil || p.Attempt != 2 || p.Message != "second attempt" || p.Percent != 100 {
		t.Fatalf("progress after the stale attempt's report: %+v, %v", p, err)
	}
}

// A handler reporting in a tight loop costs a write per ProgressInterval,
// not one per report; a report kept for later is written when the interval
// has passed, with no further report, and the last one lands when the
// handler returns.
func TestProgressThrottleCoalescesATightLoop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	seen := make(chan struct{})
	type loop struct {
		calls   int
		elapsed time.Duration
		err     error
	}
	done := make(chan loop, 1)
	w := startWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "busy", Handler: func(ctx context.Context, job *runtime.Job) error {
		var l loop
		start := time.Now()
		for time.Since(start) < time.Second && l.err == nil {
			l.err = job.ReportProgress(ctx, float64(l.calls%100), fmt.Sprintf("step %d", l.calls))
			l.calls++
		}
		if l.err == nil {
			l.err = job.ReportProgress(ctx, 77, "waiting")
		}
		if l.err == nil {
			select {
			case <-seen:
			case <-time.After(10 * time.Second):
			}
			// Written at once, or, within the interval of the write that
			// made "waiting" seen, when the handler returns.
			l.err = job.ReportProgress(ctx, 100, "done")
		}
		l.elapsed = time.Since(start)
		done <- l
		return l.err
	}})
	id := enqueue(t, b.pool, "busy", map[string]int{})
	b.waitProgress(t, id, "waiting", 15*time.Second)
	close(seen)
	b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	l := <-done
	if l.err != nil {
		t.Fatalf("a report failed: %v", l.err)
	}
	p, err := runtime.GetJobProgress(ctx, b.pool, id)
	if err != nil || p == nil || p.Message != "done" || p.Percent != 100 {
		t.Fatalf("the last report did not land: %+v, %v", p, err)
	}
	writes := w.ProgressWrites()
	most := int64(l.elapsed/runtime.ProgressInterval) + 2
	if l.calls < 1000 || writes > most || writes < 3 {
		t.Fatalf("%d reports in %s made %d writes, want at least 3 and at most %d", l.calls+2, l.elapsed, writes, most)
	}
}

// Bad reports are refused with an error that says what is wrong, and the
// progress recorded before them stays.
func TestProgressRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	type badCase struct {
		name string
		call func(context.Context, *runtime.Job) error
		want string
	}
	percent := func(p float64) func(context.Context, *runtime.Job) error {
		return func(ctx context.Context, job *runtime.Job) error { return job.ReportProgress(ctx, p, "x") }
	}
	message := func(m string) func(context.Context, *runtime.Job) error {
		return func(ctx context.Context, job *runtime.Job) error { return job.ReportProgress(ctx, 1, m) }
	}
	value := func(v any) func(context.Context, *runtime.Job) error {
		return func(ctx context.Context, job *runtime.Job) error { return job.ReportProgressValue(ctx, 1, "x", v) }
	}
	cases := []badCase{
		{"NaN", percent(math.NaN()), "percent is NaN, not a number from 0 to 100"},
		{"infinite", percent(math.Inf(1)), "percent is +Inf, not a number from 0 to 100"},
		{"negative", percent(-1), "percent is -1, outside 0 to 100"},
		{"above 100", percent(100.5), "percent is 100.5, outside 0 to 100"},
		{"long message", message(strings.Repeat("a", runtime.MaxProgressMessageBytes+1)), "message is 1025 bytes, more than the 1024 allowed"},
		{"message not UTF-8", message("a\xffb"), "message is not valid UTF-8"},
		{"message with NUL", message("a\x00b"), "message holds a NUL character"},
		{"large value", value(strings.Repeat("a", runtime.MaxProgressBytes)), "bytes of JSON, more than the 4096 allowed"},
		{"value with NUL", value("a\x00b"), `progress value contains \u0000`},
		{"value not JSON", value(make(chan int)), "encode progress value"},
	}
	errs := make(chan []error, 1)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "bad", Handler: func(ctx context.Context, job *runtime.Job) error {
		if err := job.ReportProgress(ctx, 5, "good"); err != nil {
			return err
		}
		var got []error
		for _, c := range cases {
			got = append(got, c.call(ctx, job))
		}
		errs <- got
		return nil
	}})
	id := enqueue(t, b.pool, "bad", map[string]int{})
	b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	got := <-errs
	for i, c := range cases {
		if got[i] == nil || !strings.Contains(got[i].Error(), c.want) || !strings.Contains(got[i].Error(), fmt.Sprintf("job %d", id)) {
			t.Errorf("%s: %v, want an error of job %d containing %q", c.name, got[i], id, c.want)
		}
	}
	p, err := runtime.GetJobProgress(ctx, b.pool, id)
	if err != nil || p == nil || p.Message != "good" || p.Percent != 5 || p.Value != nil {
		t.Fatalf("progress after the bad reports: %+v, %v", p, err)
	}
	// A Job built by hand checks its input the same way.
	if err := (&runtime.Job{ID: 9}).ReportProgress(ctx, math.NaN(), ""); err == nil || !strings.Contains(err.Error(), "NaN") {
		t.Errorf("a hand-built Job's bad report: %v", err)
	}
}

// A failed job keeps the progress its attempt reached, named by the
// attempt; deleting the job deletes its progress.
func TestProgressStaysWithAFailedJobAndGoesWithItsDeletion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "stuck", Handler: func(ctx context.Context, job *runtime.Job) error {
		if err := job.ReportProgress(ctx, 30, "stuck at 30"); err != nil {
			return err
		}
		return runtime.NoRetry(errors.New("cannot go on"))
	}})
	id := enqueue(t, b.pool, "stuck", map[string]int{})
	other := enqueue(t, b.pool, "stuck", map[string]int{}, runtime.WithQueue("elsewhere"))
	b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusFailed)
	p, err := runtime.GetJobProgress(ctx, b.pool, id)
	if err != nil || p == nil || p.Attempt != 1 || p.Percent != 30 || p.Message != "stuck at 30" {
		t.Fatalf("progress of the failed job: %+v, %v", p, err)
	}
	if n, err := runtime.DeleteJobs(ctx, b.pool, runtime.JobFilter{Queue: runtime.DefaultQueue}, nil); err != nil || n != 1 {
		t.Fatalf("delete the failed job: %d, %v", n, err)
	}
	if p, err := runtime.GetJobProgress(ctx, b.pool, id); err != nil || p != nil {
		t.Fatalf("progress of the deleted job: %+v, %v", p, err)
	}
	if p, err := runtime.GetJobProgress(ctx, b.pool, other); err != nil || p != nil {
		t.Fatalf("progress of a job that never ran: %+v, %v", p, err)
	}
}

// A report never replaces the progress of a later attempt, even when the
// job's row still names the reporting attempt (as when a later attempt's
// report races an earlier one's check of the row).
func TestProgressOfALaterAttemptIsNotReplaced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	reported := make(chan struct{})
	bumped := make(chan struct{})
	late := make(chan error, 1)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "racing", Handler: func(ctx context.Context, job *runtime.Job) error {
		if err := job.ReportProgress(ctx, 10, "mine"); err != nil {
			return err
		}
		close(reported)
		<-bumped
		time.Sleep(runtime.ProgressInterval) // so the next report is written at once
		late <- job.ReportProgress(ctx, 20, "late")
		return nil
	}})
	id := enqueue(t, b.pool, "racing", map[string]int{})
	select {
	case <-reported:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not start")
	}
	if n, err := b.q.SetProgressAttempt(ctx, testdb.SetProgressAttemptParams{JobID: int64(id), Attempt: 9}); err != nil || n != 1 {
		t.Fatalf("set the progress's attempt: %d, %v", n, err)
	}
	close(bumped)
	if err := <-late; !errors.Is(err, runtime.ErrAttemptNotCurrent) {
		t.Fatalf("a report over a later attempt's progress: %v, want ErrAttemptNotCurrent", err)
	}
	b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	p, err := runtime.GetJobProgress(ctx, b.pool, id)
	if err != nil || p == nil || p.Attempt != 9 || p.Message != "mine" {
		t.Fatalf("progress after the refused report: %+v, %v", p, err)
	}
}

// An operator's retry starts the job's attempts from 1 again, and clean:
// the progress of the attempts before goes, and the fresh attempts'
// reports are recorded.
func TestProgressAfterAnOperatorsRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var runs atomic.Int32
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "again", Backoff: fastRetry,
		Handler: func(ctx context.Context, job *runtime.Job) error {
			run := runs.Add(1)
			if err := job.ReportProgress(ctx, float64(10*run), fmt.Sprintf("run %d, attempt %d", run, job.Attempt)); err != nil {
				return runtime.NoRetry(err)
			}
			if run <= 2 {
				return errors.New("not yet")
			}
			return nil
		}})
	id := enqueue(t, b.pool, "again", map[string]int{}, runtime.WithMaxAttempts(2))
	b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusFailed)
	if p, err := runtime.GetJobProgress(ctx, b.pool, id); err != nil || p == nil || p.Attempt != 2 || p.Message != "run 2, attempt 2" {
		t.Fatalf("progress of the failed job: %+v, %v", p, err)
	}
	// Read in the retry's own transaction: once it commits, the worker may
	// run the job and report before a read from outside.
	if err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if ok, err := runtime.RetryJob(ctx, tx, id); err != nil || !ok {
			return fmt.Errorf("retry: %v, %w", ok, err)
		}
		if p, err := runtime.GetJobProgress(ctx, tx, id); err != nil || p != nil {
			return fmt.Errorf("progress of the retried job before it runs: %+v, %w", p, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	j := b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded, testdb.PgtaskJobStatusFailed)
	if j.Status != testdb.PgtaskJobStatusSucceeded {
		t.Fatalf("the retried job %s: %s", j.Status, j.Errors)
	}
	if p, err := runtime.GetJobProgress(ctx, b.pool, id); err != nil || p == nil || p.Attempt != 1 || p.Message != "run 3, attempt 1" {
		t.Fatalf("progress of the retried job's attempt: %+v, %v", p, err)
	}
}

// Held mode: attempt 1 loses its session and keeps running; the job is
// rescued (out of attempts), an operator retries it, and a fresh attempt 1
// runs. The lost attempt 1's report is refused: it shares the current
// attempt's number, not its claim's token.
func TestProgressOfALostHeldAttemptIsRefusedAfterAnOperatorsRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var runs atomic.Int32
	running := make(chan struct{}, 2)
	release := make(chan struct{})
	late := make(chan error, 1)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "stale", Handler: func(ctx context.Context, job *runtime.Job) error {
		if runs.Add(1) == 1 {
			_ = job.ReportProgress(ctx, 10, "first")
			running <- struct{}{}
			<-release
			time.Sleep(runtime.ProgressInterval)
			late <- job.ReportProgress(ctx, 90, "stale")
			return nil
		}
		_ = job.ReportProgress(ctx, 5, "second")
		running <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}})
	id := enqueue(t, b.pool, "stale", map[string]int{}, runtime.WithMaxAttempts(1))
	<-running
	b.waitProgress(t, id, "first", 5*time.Second)
	j := b.job(t, id)
	if _, err := b.q.TerminateBackend(ctx, j.OwnerPid.Int32); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	// What another worker's rescue_orphans does once this worker's sessions are all gone.
	if _, err := b.gen.RescueJobs(ctx, []int64{int64(id)}); err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, id, 5*time.Second, testdb.PgtaskJobStatusFailed)
	if ok, err := runtime.RetryJob(ctx, b.pool, id); err != nil || !ok {
		t.Fatalf("retry: %v %v", ok, err)
	}
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("fresh attempt did not start")
	}
	b.waitProgress(t, id, "second", 5*time.Second)
	close(release)
	err := <-late
	p, perr := runtime.GetJobProgress(ctx, b.pool, id)
	if perr != nil || p == nil {
		t.Fatalf("progress: %+v, %v", p, perr)
	}
	if !errors.Is(err, runtime.ErrAttemptNotCurrent) || p.Message != "second" {
		t.Fatalf("the lost attempt's report: %v; progress now %+v; want it refused and the current attempt's kept", err, p)
	}
}

// A report the same as the last one written is not written again: each
// write leaves a version of the row behind.
func TestProgressRepeatedIsNotWrittenAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done := make(chan error, 1)
	w := startWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "same", Handler: func(ctx context.Context, job *runtime.Job) error {
		for range 4 {
			if err := job.ReportProgress(ctx, 50, "halfway"); err != nil {
				done <- err
				return err
			}
			time.Sleep(runtime.ProgressInterval + 50*time.Millisecond)
		}
		done <- nil
		return nil
	}})
	id := enqueue(t, b.pool, "same", map[string]int{})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	if n := w.ProgressWrites(); n != 1 {
		t.Errorf("4 reports of the same progress, %s apart, made %d writes, want 1", runtime.ProgressInterval+50*time.Millisecond, n)
	}
}
