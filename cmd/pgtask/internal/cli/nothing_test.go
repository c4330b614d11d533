package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// Acting on nothing is a failure unless a flag says it is not: a job id
// that names no job, a filter that matches none, a queue nothing has used.
func TestActingOnNothingFails(t *testing.T) {
	t.Parallel()
	pool := pgtasktest.NewPool(t)
	url := pool.Config().ConnString()
	ctx := context.Background()
	id, err := runtime.Enqueue(ctx, pool, runtime.EnqueueRequest{Kind: "mail", Payload: []byte(`{}`),
		EnqueueOptions: runtime.EnqueueOptions{Queue: "emails"}})
	if err != nil {
		t.Fatal(err)
	}
	job := fmt.Sprint(id)
	db := func(args ...string) []string { return withDB(url, args...) }
	for _, c := range []struct {
		args       []string
		code       int
		out, inErr string
	}{
		{db("retry", "99999"), 1, "retried 0 jobs\n", "job 99999 does not exist"},
		{db("cancel", "99999"), 1, "cancelled 0 jobs\n", "job 99999 does not exist"},
		{db("cancel", "-allow-none", "99999"), 0, "cancelled 0 jobs\n", "job 99999 does not exist"},
		{db("retry", job), 1, "retried 0 jobs\n", "job " + job + " is queued: only failed and cancelled jobs are retried"},
		{db("retry", "-queue", "nosuchqueue"), 1, "retried 0 jobs\n", "no job was retried"},
		{db("cancel", "-queue", "nosuchqueue"), 1, "cancelled 0 jobs\n", "no job was cancelled"},
		{db("purge", "-queue", "nosuchqueue", "-allow-none"), 0, "deleted 0 jobs\n", ""},
		{db("pause", "nosuchqueue"), 1, "", "queue nosuchqueue has no jobs"},
		{db("pause", "emails", "nosuchqueue"), 1, "", "queue nosuchqueue has no jobs"},
		{db("resume", "nosuchqueue"), 1, "", "queue nosuchqueue is not paused and has no jobs"},
		{db("cancel", "99999", job), 1, "cancelled 1 jobs\n", "job 99999 does not exist"},
	} {
		code, out, errOut := run(t, c.args...)
		if code != c.code || out != c.out || !strings.Contains(errOut, c.inErr) {
			t.Errorf("pgtask %v: code %d, stdout %q, stderr %q; want %d, %q and %q", c.args, code, out, errOut, c.code, c.out, c.inErr)
		}
	}
	paused, err := runtime.PausedQueues(ctx, pool)
	if err != nil || len(paused) != 0 {
		t.Fatalf("paused queues %v, %v; want none paused by a refused pause", paused, err)
	}
	if code, out, errOut := run(t, db("pause", "-create", "nosuchqueue")...); code != 0 || out != "paused queue nosuchqueue\n" {
		t.Fatalf("pause -create: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, errOut := run(t, db("resume", "nosuchqueue")...); code != 0 || out != "resumed queue nosuchqueue\n" {
		t.Fatalf("resume a queue paused with -create: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	// A queue whose jobs have all finished is known too.
	done, err := runtime.Enqueue(ctx, pool, runtime.EnqueueRequest{Kind: "report", Payload: []byte(`{}`),
		EnqueueOptions: runtime.EnqueueOptions{Queue: "reports"}})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := runtime.CancelJob(ctx, pool, done); !ok || err != nil {
		t.Fatalf("cancel job %d: %v, %v", done, ok, err)
	}
	if code, out, errOut := run(t, db("pause", "reports")...); code != 0 || out != "paused queue reports\n" {
		t.Fatalf("pause a queue whose only job is cancelled: code %d, stdout %q, stderr %q", code, out, errOut)
	}
}
