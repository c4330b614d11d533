package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/dashboard"
)

// The batches page lists batches newest first, open or ended; a batch's
// page shows its counts now, its callbacks and its jobs, each linked; a job
// of a batch links to its batch's page.
func TestBatchPages(t *testing.T) {
	t.Parallel()
	s := seed(t)
	ctx := context.Background()
	reqs := make([]runtime.EnqueueRequest, 3)
	for i := range reqs {
		reqs[i] = runtime.EnqueueRequest{Kind: "import_row", Payload: []byte(`{}`),
			EnqueueOptions: runtime.EnqueueOptions{Queue: "imports"}}
	}
	done := &runtime.EnqueueRequest{Kind: "import_done", Payload: []byte(`{}`), EnqueueOptions: runtime.EnqueueOptions{Queue: "imports"}}
	first, _, err := runtime.EnqueueBatch(ctx, s.pool, reqs[:1], runtime.BatchOptions{})
	must(t, err)
	id, ids, err := runtime.EnqueueBatch(ctx, s.pool, reqs, runtime.BatchOptions{OnFinish: done})
	must(t, err)
	if _, err := runtime.CancelJob(ctx, s.pool, ids[1]); err != nil {
		t.Fatal(err)
	}
	b, err := runtime.GetBatch(ctx, s.pool, id)
	must(t, err)
	c := newDashboard(t, s, dashboard.Options{})

	body := c.get("/batches")
	if !strings.Contains(body, `<a href="/batches" aria-current="page">Batches</a>`) {
		t.Errorf("the batches page is not the current one in the navigation")
	}
	head := []string{"Batch", "Created", "State", "Jobs", "Succeeded", "Failed", "Cancelled", "Deleted", "Callbacks"}
	all := rows(body)
	if len(all) != 3 || !slices.Equal(all[0], head) {
		t.Fatalf("batches page rows %q, want the header %q and two batches", all, head)
	}
	if all[1][0] != fmt.Sprint(id) || all[2][0] != fmt.Sprint(first) {
		t.Errorf("batches listed %s then %s, want %d (the newest) then %d", all[1][0], all[2][0], id, first)
	}
	if all[1][2] != "open" || all[1][3] != "3" || all[1][5] != "on finish" {
		t.Errorf("batch %d's row %q, want it open, 3 jobs, an on-finish callback", id, all[1])
	}
	if !strings.Contains(body, fmt.Sprintf(`href="/jobs/%d">on finish</a>`, b.OnFinish)) {
		t.Errorf("the batches page does not link batch %d's callback, job %d", id, b.OnFinish)
	}

	body = c.get(fmt.Sprintf("/batches/%d", id))
	page := text(body)
	if !strings.Contains(page, "Now 0 succeeded, 0 failed, 1 cancelled, 0 deleted, 2 not finished") {
		t.Errorf("batch page counts:\n%s", page)
	}
	for _, j := range ids {
		if !strings.Contains(body, fmt.Sprintf(`<a href="/jobs/%d">%d</a>`, j, j)) {
			t.Errorf("the batch page does not list its job %d", j)
		}
	}
	if got := row(body, fmt.Sprint(ids[1])); len(got) < 3 || got[2] != "cancelled" {
		t.Errorf("job %d's row %q, want it cancelled", ids[1], got)
	}
	if !strings.Contains(body, fmt.Sprintf(`<a href="/jobs/%d">job %d</a>`, b.OnFinish, b.OnFinish)) {
		t.Errorf("the batch page does not link its on-finish callback, job %d", b.OnFinish)
	}

	if body := c.get(fmt.Sprintf("/jobs/%d", ids[0])); !strings.Contains(body, fmt.Sprintf(`<a href="/batches/%d">%d</a>`, id, id)) {
		t.Errorf("job %d's page does not link its batch %d", ids[0], id)
	}
	for path, want := range map[string]int{
		"/batches/999999": http.StatusNotFound, "/batches/x": http.StatusNotFound,
		"/batches?before=x": http.StatusBadRequest, fmt.Sprintf("/batches/%d?after=-1", id): http.StatusBadRequest,
	} {
		if resp, _ := c.getStatus(path); resp.StatusCode != want {
			t.Errorf("GET %s: %s, want %d", path, resp.Status, want)
		}
	}
}
