package cli_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// pgtask retry retries every job it can: a job whose unique key another job
// holds now is named with that job, the others are retried, and the command
// exits 1 (0 with -allow-none) for the jobs it left.
func TestRetryNamesTheJobsWhoseUniqueKeysAreHeld(t *testing.T) {
	t.Parallel()
	pool := pgtasktest.NewPool(t)
	url := pool.Config().ConnString()
	ctx := context.Background()
	enq := func(key string, delay time.Duration) runtime.JobID {
		t.Helper()
		id, err := runtime.Enqueue(ctx, pool, runtime.EnqueueRequest{Kind: "sync", Payload: []byte(`{}`),
			EnqueueOptions: runtime.EnqueueOptions{UniqueKey: key, Delay: delay}})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	a, b, c, d := enq("a", 0), enq("b", 0), enq("c", 0), enq("d", 0)
	w := quietWorker(t, url)
	if err := w.Register(runtime.Registration{Kind: "sync", Handler: func(context.Context, *runtime.Job) error {
		return runtime.NoRetry(errors.New("account locked"))
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	holderA, holderB := enq("a", time.Hour), enq("b", time.Hour)
	db := func(args ...string) []string { return withDB(url, args...) }

	code, out, errOut := run(t, db("retry", fmt.Sprint(a), fmt.Sprint(c))...)
	if want := fmt.Sprintf("job %d not retried: job %d holds its unique key now", a, holderA); code != 1 || out != "retried 1 jobs\n" || !strings.Contains(errOut, want) {
		t.Errorf("retry %d %d: code %d, stdout %q, stderr %q; want 1, one retried and %q", a, c, code, out, errOut, want)
	}
	code, out, errOut = run(t, db("retry", "-status", "failed")...)
	for _, want := range []string{
		fmt.Sprintf("job %d not retried: job %d holds its unique key now", a, holderA),
		fmt.Sprintf("job %d not retried: job %d holds its unique key now", b, holderB),
	} {
		if code != 1 || out != "retried 1 jobs\n" || !strings.Contains(errOut, want) {
			t.Errorf("retry -status failed: code %d, stdout %q, stderr %q; want 1, job %d retried and %q", code, out, errOut, d, want)
		}
	}
	code, out, errOut = run(t, db("retry", "-status", "failed", "-allow-none")...)
	if code != 0 || out != "retried 0 jobs\n" || !strings.Contains(errOut, fmt.Sprintf("job %d not retried", b)) {
		t.Errorf("retry -status failed -allow-none: code %d, stdout %q, stderr %q; want 0 and jobs %d and %d named", code, out, errOut, a, b)
	}
}
