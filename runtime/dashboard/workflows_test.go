package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/dashboard"
)

// A workflow's page shows its state and counts and its steps, a page at a
// time, each with its status and parents, a fan-in's parents cut short; a
// step's page links its workflow and its parents.
func TestWorkflowPage(t *testing.T) {
	t.Parallel()
	s := seed(t)
	ctx := context.Background()
	wf := runtime.NewWorkflow("import")
	var deps []runtime.StepOption
	var parents []runtime.Step
	for range 60 {
		p := wf.Add(runtime.EnqueueRequest{Kind: "fetch", Payload: []byte(`{}`)})
		parents = append(parents, p)
		deps = append(deps, runtime.After(p))
	}
	merge := wf.Add(runtime.EnqueueRequest{Kind: "merge", Payload: []byte(`{}`)}, deps...)
	id, err := wf.Enqueue(ctx, s.pool)
	must(t, err)
	c := newDashboard(t, s, dashboard.Options{})

	body := c.get(fmt.Sprintf("/workflows/%d", id))
	page := text(body)
	if !strings.Contains(page, "Steps 61, 60 dependencies") || !strings.Contains(page, "1 waiting for parents, 60 queued") {
		t.Errorf("workflow page:\n%s", page)
	}
	if got := len(rows(body)); got != 51 {
		t.Errorf("%d rows on the first page, want a header and 50 steps", got)
	}
	next := fmt.Sprintf(`href="/workflows/%d?after=%d"`, id, parents[49].JobID())
	if !strings.Contains(body, next) {
		t.Errorf("the first page does not link the next: want %s", next)
	}
	body = c.get(fmt.Sprintf("/workflows/%d?after=%d", id, parents[49].JobID()))
	got := row(body, fmt.Sprint(merge.JobID()))
	if len(got) < 4 || got[2] != "waiting for 60" || !strings.HasSuffix(got[3], "and 40 more") {
		t.Errorf("the fan-in step's row %q, want it waiting for 60 parents, 20 shown", got)
	}
	body = c.get(fmt.Sprintf("/jobs/%d", merge.JobID()))
	if !strings.Contains(body, fmt.Sprintf(`<a href="/workflows/%d">%d</a>`, id, id)) ||
		!strings.Contains(body, fmt.Sprintf(`<a href="/jobs/%d">%d</a>`, parents[0].JobID(), parents[0].JobID())) {
		t.Errorf("the step's page does not link its workflow %d and its parents", id)
	}
	for path, want := range map[string]int{
		"/workflows/999999": http.StatusNotFound, "/workflows/x": http.StatusNotFound,
		fmt.Sprintf("/workflows/%d?after=-1", id): http.StatusBadRequest,
	} {
		if resp, _ := c.getStatus(path); resp.StatusCode != want {
			t.Errorf("GET %s: %s, want %d", path, resp.Status, want)
		}
	}
}

// The workflows page lists them newest first, a page at a time, each
// linking its own page; a cancelled one says so.
func TestWorkflowsPage(t *testing.T) {
	t.Parallel()
	s := seed(t)
	ctx := context.Background()
	var ids []runtime.WorkflowID
	for i := range 52 {
		wf := runtime.NewWorkflow(fmt.Sprintf("import-%d", i))
		first := wf.Add(runtime.EnqueueRequest{Kind: "fetch", Payload: []byte(`{}`)})
		wf.Add(runtime.EnqueueRequest{Kind: "merge", Payload: []byte(`{}`)}, runtime.After(first))
		id, err := wf.Enqueue(ctx, s.pool)
		must(t, err)
		ids = append(ids, id)
	}
	if ok, err := runtime.CancelWorkflowByID(ctx, s.pool, ids[51]); err != nil || !ok {
		t.Fatalf("cancel workflow %d: %v, %v", ids[51], ok, err)
	}
	c := newDashboard(t, s, dashboard.Options{})

	body := c.get("/workflows")
	if !strings.Contains(body, `<a href="/workflows" aria-current="page">Workflows</a>`) {
		t.Error("the workflows page is not the current one in the navigation")
	}
	if got := len(rows(body)); got != 51 {
		t.Errorf("%d rows on the first page, want a header and 50 workflows", got)
	}
	newest := row(body, fmt.Sprint(ids[51]))
	if len(newest) < 5 || newest[1] != "import-51" || newest[3] != "2" || !strings.HasPrefix(newest[4], "cancelled") {
		t.Errorf("the newest workflow's row %q, want import-51, 2 steps, cancelled", newest)
	}
	if got := row(body, fmt.Sprint(ids[50])); len(got) < 5 || got[4] != "state and steps" {
		t.Errorf("an uncancelled workflow's row %q, want a link to its state", got)
	}
	if !strings.Contains(body, fmt.Sprintf(`<a href="/workflows/%d">%d</a>`, ids[51], ids[51])) {
		t.Errorf("the list does not link workflow %d's page", ids[51])
	}
	next := fmt.Sprintf(`href="/workflows?before=%d"`, ids[2])
	if !strings.Contains(body, next) {
		t.Errorf("the first page does not link the next: want %s", next)
	}
	body = c.get(fmt.Sprintf("/workflows?before=%d", ids[2]))
	if got := len(rows(body)); got != 3 || row(body, fmt.Sprint(ids[0])) == nil || row(body, fmt.Sprint(ids[1])) == nil {
		t.Errorf("the last page has %d rows, want a header and workflows %d and %d", got, ids[1], ids[0])
	}
	if strings.Contains(body, `rel="next"`) {
		t.Error("the last page links a next one")
	}
	for path, want := range map[string]int{"/workflows?before=x": http.StatusBadRequest, "/workflows?before=0": http.StatusBadRequest} {
		if resp, _ := c.getStatus(path); resp.StatusCode != want {
			t.Errorf("GET %s: %s, want %d", path, resp.Status, want)
		}
	}
}
