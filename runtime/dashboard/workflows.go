package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
)

type workflowsPage struct {
	page
	Workflows []gen.ListWorkflowsRow
	// Next is the next page's link; "" at the end.
	Next string
}

// workflowsPage lists the workflows a page at a time, newest first, each
// linking its own page, where its state and its steps' counts are read.
// (Those take a look at each of its steps: a list of workflows of
// thousands of steps each would read them all.)
func (h *handler) workflowsPage(w http.ResponseWriter, r *http.Request) {
	before := int64(0)
	if v := r.URL.Query().Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			http.Error(w, fmt.Sprintf("400 Bad Request: before %q: want a workflow id", v), http.StatusBadRequest)
			return
		}
		before = n
	}
	rows, err := h.q.ListWorkflows(r.Context(), gen.ListWorkflowsParams{BeforeID: before, Max: int32(h.bound.page) + 1})
	if err != nil {
		h.fail(w, r, fmt.Errorf("list workflows: %w", err))
		return
	}
	data := workflowsPage{page: h.page(r, "workflows", "Workflows")}
	if len(rows) > h.bound.page {
		rows = rows[:h.bound.page]
		data.Next = h.base + "/workflows?before=" + strconv.FormatInt(rows[h.bound.page-1].ID, 10)
	}
	data.Workflows = rows
	h.render(w, r, http.StatusOK, "workflows", data)
}

type workflowPage struct {
	page
	Workflow *runtime.WorkflowState
	Steps    []runtime.WorkflowStep
	// Next is the link to the next page of its steps; "" at the end.
	Next string
}

// workflowPage shows a workflow: its state and its steps' counts (one
// query), and its steps a page at a time, by id, each with its status and
// parents.
func (h *handler) workflowPage(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		http.Error(w, fmt.Sprintf("404 Not Found: %q is not a workflow id", r.PathValue("id")), http.StatusNotFound)
		return
	}
	after := int64(0)
	if v := r.URL.Query().Get("after"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
			http.Error(w, fmt.Sprintf("400 Bad Request: after %q: want a job id", v), http.StatusBadRequest)
			return
		}
	}
	wf, err := runtime.GetWorkflow(r.Context(), h.db, runtime.WorkflowID(id))
	if errors.Is(err, runtime.ErrWorkflowNotFound) {
		http.Error(w, fmt.Sprintf("404 Not Found: there is no workflow %d (retention may have deleted it)", id), http.StatusNotFound)
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	steps, err := runtime.WorkflowSteps(r.Context(), h.db, wf.ID, runtime.JobID(after), h.bound.page+1)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	data := workflowPage{page: h.page(r, "workflows", fmt.Sprintf("Workflow %d", id)), Workflow: wf}
	if len(steps) > h.bound.page {
		steps = steps[:h.bound.page]
		data.Next = fmt.Sprintf("%s/workflows/%d?after=%d", h.base, id, steps[h.bound.page-1].JobID)
	}
	data.Steps = steps
	h.render(w, r, http.StatusOK, "workflow", data)
}
