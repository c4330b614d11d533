package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// jobs list shows each job's last error, on its one line, cut short.
func TestJobsListShowsTheLastError(t *testing.T) {
	t.Parallel()
	url := pgtasktest.NewDatabase(t)
	ctx := context.Background()
	w := quietWorker(t, url)
	long := "the mail server said no\nand then " + strings.Repeat("much more ", 20)
	if err := w.Register(runtime.Registration{Kind: "mail", Handler: func(context.Context, *runtime.Job) error {
		return runtime.NoRetry(errors.New(long))
	}}); err != nil {
		t.Fatal(err)
	}
	failed, err := runtime.Enqueue(ctx, w.Pool(), runtime.EnqueueRequest{Kind: "mail", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := w.WorkOne(ctx); err != nil || j == nil || j.Status != runtime.StatusFailed {
		t.Fatalf("work the failing job: %+v, %v", j, err)
	}
	queued, err := runtime.Enqueue(ctx, w.Pool(), runtime.EnqueueRequest{Kind: "mail", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "jobs", "list", "-database-url", url)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasSuffix(strings.TrimSpace(lines[0]), "last error") {
		t.Fatalf("jobs list: code %d, stderr %q, stdout:\n%s\nwant a header with a last error column and two jobs", code, errOut, out)
	}
	_, last, found := strings.Cut(lines[1], "the mail server")
	last = "the mail server" + last
	if !found || !strings.HasPrefix(lines[1], fmt.Sprint(failed)+" ") || !strings.Contains(lines[1], " failed ") ||
		!strings.HasPrefix(last, "the mail server said no and then much more") || !strings.HasSuffix(last, "…") ||
		len([]rune(last)) > 60 {
		t.Errorf("the failed job's line %q: want its error on one line, cut short", lines[1])
	}
	if !strings.HasPrefix(lines[2], fmt.Sprint(queued)+" ") || !strings.Contains(lines[2], " queued ") || strings.Contains(lines[2], "mail server") {
		t.Errorf("the queued job's line %q: want it queued, with no error", lines[2])
	}
}

// quietWorker is a worker of one runner on the default queue of the
// database at url, which logs nowhere; it is closed when the test ends.
func quietWorker(t *testing.T, url string) *runtime.Worker {
	t.Helper()
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	w, err := runtime.NewWorker(context.Background(), pc, runtime.Config{
		Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 1}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// jobs show gives the job's snooze count, in text and in JSON.
func TestJobsShowShowsSnoozes(t *testing.T) {
	t.Parallel()
	url := pgtasktest.NewDatabase(t)
	ctx := context.Background()
	w := quietWorker(t, url)
	if err := w.Register(runtime.Registration{Kind: "upload", Handler: func(_ context.Context, job *runtime.Job) error {
		return runtime.Snooze(time.Hour)
	}}); err != nil {
		t.Fatal(err)
	}
	id, err := runtime.Enqueue(ctx, w.Pool(), runtime.EnqueueRequest{Kind: "upload", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := w.WorkOne(ctx); err != nil || j == nil || j.Status != runtime.StatusScheduled || j.Snoozes != 1 || j.Attempts != 0 {
		t.Fatalf("work the snoozing job: %+v, %v; want it scheduled, 1 snooze, no attempt spent", j, err)
	}
	code, out, errOut := run(t, "jobs", "show", "-database-url", url, fmt.Sprint(id))
	if code != 0 || !strings.Contains(out, "attempts 0 of 20, snoozes 1,") {
		t.Fatalf("jobs show: code %d, stderr %q, stdout:\n%s\nwant \"attempts 0 of 20, snoozes 1,\"", code, errOut, out)
	}
	code, out, errOut = run(t, "jobs", "show", "-json", "-database-url", url, fmt.Sprint(id))
	if code != 0 || !strings.Contains(out, `"snoozes": 1`) {
		t.Fatalf("jobs show -json: code %d, stderr %q, stdout:\n%s\nwant \"snoozes\": 1", code, errOut, out)
	}
}

// jobs show gives the progress the job's attempt last reported, in text and
// in JSON; a job that reported none shows no progress.
func TestJobsShowShowsProgress(t *testing.T) {
	t.Parallel()
	url := pgtasktest.NewDatabase(t)
	ctx := context.Background()
	w := quietWorker(t, url)
	if err := w.Register(runtime.Registration{Kind: "import", Handler: func(ctx context.Context, job *runtime.Job) error {
		if err := job.ReportProgressValue(ctx, 62.5, "rows imported", map[string]int{"rows": 625}); err != nil {
			return err
		}
		return runtime.NoRetry(errors.New("the file ended early"))
	}}); err != nil {
		t.Fatal(err)
	}
	id, err := runtime.Enqueue(ctx, w.Pool(), runtime.EnqueueRequest{Kind: "import", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := w.WorkOne(ctx); err != nil || j == nil || j.Status != runtime.StatusFailed {
		t.Fatalf("work the job: %+v, %v", j, err)
	}
	code, out, errOut := run(t, "jobs", "show", "-database-url", url, fmt.Sprint(id))
	if code != 0 || !strings.Contains(out, "\nprogress 62.5% at attempt 1, reported ") || !strings.Contains(out, ": rows imported\n") ||
		!strings.Contains(out, "\nprogress value {\"rows\": 625}\n") {
		t.Fatalf("jobs show: code %d, stderr %q, stdout:\n%s\nwant the progress, its attempt, message and value", code, errOut, out)
	}
	code, out, errOut = run(t, "jobs", "show", "-json", "-database-url", url, fmt.Sprint(id))
	if code != 0 || !strings.Contains(out, `"progress": {`) || !strings.Contains(out, `"percent": 62.5`) ||
		!strings.Contains(out, `"message": "rows imported"`) || !strings.Contains(out, `"attempt": 1,`) {
		t.Fatalf("jobs show -json: code %d, stderr %q, stdout:\n%s\nwant its progress", code, errOut, out)
	}

	other, err := runtime.Enqueue(ctx, w.Pool(), runtime.EnqueueRequest{Kind: "import", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run(t, "jobs", "show", "-database-url", url, fmt.Sprint(other))
	if code != 0 || strings.Contains(out, "progress") {
		t.Fatalf("jobs show of a job that reported nothing: code %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
}

// jobs show names a job's batch; batches show prints the batch's counts
// and callbacks, and says so for an id with no batch.
func TestBatchesShow(t *testing.T) {
	t.Parallel()
	pool := pgtasktest.NewPool(t)
	url := pool.Config().ConnString()
	ctx := context.Background()
	job := runtime.EnqueueRequest{Kind: "mail", Payload: []byte(`{}`)}
	done := runtime.EnqueueRequest{Kind: "mailed", Payload: []byte(`{}`)}
	bid, ids, err := runtime.EnqueueBatch(ctx, pool, []runtime.EnqueueRequest{job, job}, runtime.BatchOptions{OnFinish: &done})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := runtime.CancelJob(ctx, pool, ids[1]); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	code, out, errOut := run(t, "jobs", "show", fmt.Sprint(ids[0]), "-database-url", url)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("\nbatch %d\n", bid)) {
		t.Fatalf("jobs show: code %d, stderr %q, stdout:\n%s\nwant the batch named", code, errOut, out)
	}
	code, out, errOut = run(t, "batches", "show", fmt.Sprint(bid), "-database-url", url)
	want := fmt.Sprintf("batch %d: open\n2 jobs: 0 succeeded, 0 failed, 1 cancelled, 0 deleted\n", bid)
	if code != 0 || !strings.HasPrefix(out, want) || !strings.Contains(out, "on finish: job ") {
		t.Fatalf("batches show: code %d, stderr %q, stdout:\n%s\nwant it to begin %q", code, errOut, out, want)
	}
	if code, _, errOut = run(t, "batches", "show", "999", "-database-url", url); code != 1 || !strings.Contains(errOut, "batch not found") {
		t.Fatalf("batches show 999: code %d, stderr %q", code, errOut)
	}
	if code, _, _ = run(t, "batches", "show", "x", "-database-url", url); code != 2 {
		t.Fatalf("batches show x: code %d, want 2", code)
	}
}

// jobs show says how a job's priority ages: per how long a level, and when
// next; or that it is strict; or nothing for a job at priority 0.
func TestJobsShowShowsPriorityAging(t *testing.T) {
	t.Parallel()
	url := pgtasktest.NewDatabase(t)
	ctx := context.Background()
	w := quietWorker(t, url)
	enq := func(opts ...runtime.EnqueueOption) runtime.JobID {
		t.Helper()
		r := runtime.EnqueueRequest{Kind: "k", Payload: []byte(`{}`)}
		r.Apply(opts...)
		id, err := runtime.Enqueue(ctx, w.Pool(), r)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	for _, tc := range []struct {
		id         runtime.JobID
		text, js   string
		textAbsent bool
	}{
		{enq(runtime.WithPriority(4), runtime.WithAging(2*time.Second)), "priority 4 (a level better per 2s waited; next at ", `"aging_ms": 2000`, false},
		{enq(runtime.WithPriority(4), runtime.WithAging(runtime.StrictPriority)), "priority 4 (strict: it does not age)", `"aging_ms": 0`, false},
		{enq(), "priority 0 (", `"aging_ms": 1000`, true},
	} {
		code, out, errOut := run(t, "jobs", "show", "-database-url", url, fmt.Sprint(tc.id))
		if code != 0 || strings.Contains(out, tc.text) == tc.textAbsent {
			t.Errorf("jobs show %d: code %d, stderr %q, stdout:\n%s\nwant %q present: %v", tc.id, code, errOut, out, tc.text, !tc.textAbsent)
		}
		code, out, errOut = run(t, "jobs", "show", "-json", "-database-url", url, fmt.Sprint(tc.id))
		if code != 0 || !strings.Contains(out, tc.js) {
			t.Errorf("jobs show -json %d: code %d, stderr %q, stdout:\n%s\nwant %s", tc.id, code, errOut, out, tc.js)
		}
	}
}

// jobs show names a step's workflow and parents; workflows show prints the
// workflow's state and a page of its steps, and says so for an id with no
// workflow.
func TestWorkflowsShow(t *testing.T) {
	t.Parallel()
	pool := pgtasktest.NewPool(t)
	url := pool.Config().ConnString()
	ctx := context.Background()
	step := runtime.EnqueueRequest{Kind: "fetch", Payload: []byte(`{}`)}
	wf := runtime.NewWorkflow("import")
	a, b := wf.Add(step), wf.Add(step)
	c := wf.Add(runtime.EnqueueRequest{Kind: "merge", Payload: []byte(`{}`)}, runtime.After(a), runtime.AfterAnyway(b))
	id, err := wf.Enqueue(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "jobs", "show", fmt.Sprint(c.JobID()), "-database-url", url)
	wantParents := fmt.Sprintf("\nworkflow %d\n  after job %d (step 0, on failure: cancel): not finished\n  after job %d (step 1, on failure: anyway): not finished\n",
		id, a.JobID(), b.JobID())
	if code != 0 || !strings.Contains(out, wantParents) {
		t.Fatalf("jobs show: code %d, stderr %q, stdout:\n%s\nwant %q", code, errOut, out, wantParents)
	}
	code, out, errOut = run(t, "workflows", "show", fmt.Sprint(id), "-limit", "2", "-database-url", url)
	want := fmt.Sprintf("workflow %d \"import\": running\n3 steps, 2 dependencies: 1 waiting, 2 queued, 0 started, 0 succeeded, 0 failed, 0 cancelled, 0 deleted\n", id)
	more := fmt.Sprintf("more: pgtask workflows show -after %d %d\n", b.JobID(), id)
	if code != 0 || !strings.HasPrefix(out, want) || !strings.Contains(out, fmt.Sprintf("  job %d fetch (default): queued\n", a.JobID())) ||
		!strings.HasSuffix(out, more) {
		t.Fatalf("workflows show: code %d, stderr %q, stdout:\n%s\nwant it to begin %q and end %q", code, errOut, out, want, more)
	}
	code, out, errOut = run(t, "workflows", "show", fmt.Sprint(id), "-after", fmt.Sprint(b.JobID()), "-database-url", url)
	wantStep := fmt.Sprintf("  job %d merge (default): waiting for 2 parent(s), after %d, %d\n", c.JobID(), a.JobID(), b.JobID())
	if code != 0 || !strings.HasSuffix(out, wantStep) {
		t.Fatalf("workflows show -after: code %d, stderr %q, stdout:\n%s\nwant it to end %q", code, errOut, out, wantStep)
	}
	code, out, _ = run(t, "workflows", "show", "-json", fmt.Sprint(id), "-database-url", url)
	if code != 0 || !strings.Contains(out, `"status": "running"`) || !strings.Contains(out, `"waiting_for": 2`) {
		t.Fatalf("workflows show -json: code %d, stdout:\n%s", code, out)
	}
	if code, _, errOut = run(t, "workflows", "show", "999", "-database-url", url); code != 1 || !strings.Contains(errOut, "workflow not found") {
		t.Fatalf("workflows show of no workflow: code %d, stderr %q", code, errOut)
	}
}

// workflows list shows the workflows newest first, a page at a time, with
// the command for the next page, and a cancelled one's cancel.
func TestWorkflowsList(t *testing.T) {
	t.Parallel()
	pool := pgtasktest.NewPool(t)
	url := pool.Config().ConnString()
	ctx := context.Background()
	var ids []runtime.WorkflowID
	for _, name := range []string{"import", "export", "report"} {
		wf := runtime.NewWorkflow(name)
		first := wf.Add(runtime.EnqueueRequest{Kind: "fetch", Payload: []byte(`{}`)})
		wf.Add(runtime.EnqueueRequest{Kind: "merge", Payload: []byte(`{}`)}, runtime.After(first))
		id, err := wf.Enqueue(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if ok, err := runtime.CancelWorkflowByID(ctx, pool, ids[2]); err != nil || !ok {
		t.Fatalf("cancel workflow %d: %v, %v", ids[2], ok, err)
	}
	code, out, errOut := run(t, "workflows", "list", "-limit", "2", "-database-url", url)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[0], "id ") ||
		!strings.HasPrefix(lines[1], fmt.Sprintf("%d ", ids[2])) || !strings.Contains(lines[1], " report ") ||
		strings.Count(lines[1], "T") < 2 || // created and cancelled, both as RFC 3339
		!strings.HasPrefix(lines[2], fmt.Sprintf("%d ", ids[1])) ||
		lines[3] != fmt.Sprintf("more: pgtask workflows list -before %d", ids[1]) {
		t.Fatalf("workflows list -limit 2: code %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
	code, out, errOut = run(t, "workflows", "list", "-before", fmt.Sprint(ids[1]), "-database-url", url)
	lines = strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[1], fmt.Sprintf("%d ", ids[0])) || !strings.Contains(lines[1], " import ") {
		t.Fatalf("workflows list -before: code %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
	code, out, _ = run(t, "workflows", "list", "-json", "-database-url", url)
	var list []struct {
		ID          int64      `json:"id"`
		Name        string     `json:"name"`
		Steps       int        `json:"steps"`
		CancelledAt *time.Time `json:"cancelled_at"`
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 3 ||
		list[0].ID != int64(ids[2]) || list[0].Steps != 2 || list[0].CancelledAt == nil || list[1].CancelledAt != nil {
		t.Fatalf("workflows list -json: code %d, %v, stdout:\n%s", code, err, out)
	}
	for _, bad := range [][]string{{"-limit", "0"}, {"-limit", "1001"}, {"-before", "-1"}} {
		if code, _, _ := run(t, append([]string{"workflows", "list", "-database-url", url}, bad...)...); code != 2 {
			t.Errorf("workflows list %v: code %d, want 2", bad, code)
		}
	}
}
