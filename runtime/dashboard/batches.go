package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/gen"
)

type batchesPage struct {
	page
	Batches []gen.DashboardBatchesRow
	// Next is the next page's link; "" at the end.
	Next string
}

// batchesPage lists the batches a page at a time, newest first, with the
// counts of those that ended.
func (h *handler) batchesPage(w http.ResponseWriter, r *http.Request) {
	before := int64(1<<63 - 1)
	if v := r.URL.Query().Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			http.Error(w, fmt.Sprintf("400 Bad Request: before %q: want a batch id", v), http.StatusBadRequest)
			return
		}
		before = n
	}
	rows, err := h.q.DashboardBatches(r.Context(), gen.DashboardBatchesParams{BeforeID: before, Max: int32(h.bound.page) + 1})
	if err != nil {
		h.fail(w, r, fmt.Errorf("list batches: %w", err))
		return
	}
	data := batchesPage{page: h.page(r, "batches", "Batches")}
	if len(rows) > h.bound.page {
		rows = rows[:h.bound.page]
		data.Next = h.base + "/batches?before=" + strconv.FormatInt(rows[h.bound.page-1].ID, 10)
	}
	data.Batches = rows
	h.render(w, r, http.StatusOK, "batches", data)
}

type batchPage struct {
	page
	Batch gen.DashboardBatchRow
	// The counts: those recorded when it ended, or, while it is open, of
	// its jobs now, read up to the scan bound (Partial: it stopped them).
	Succeeded, Failed, Cancelled, Deleted, Pending int
	Partial                                        bool
	Jobs                                           []gen.DashboardBatchJobsRow
	// Next is the link to the next page of its jobs; "" at the end.
	Next string
}

// batchPage shows a batch: its counts (when it ended, or now), its
// callbacks, and its jobs a page at a time, by id.
func (h *handler) batchPage(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		http.Error(w, fmt.Sprintf("404 Not Found: %q is not a batch id", r.PathValue("id")), http.StatusNotFound)
		return
	}
	after := int64(0)
	if v := r.URL.Query().Get("after"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
			http.Error(w, fmt.Sprintf("400 Bad Request: after %q: want a job id", v), http.StatusBadRequest)
			return
		}
	}
	b, err := h.q.DashboardBatch(r.Context(), gen.DashboardBatchParams{ID: id, Scan: int32(h.bound.scan)})
	if errors.Is(err, pgx.ErrNoRows) {
		http.Error(w, fmt.Sprintf("404 Not Found: there is no batch %d (retention may have deleted it)", id), http.StatusNotFound)
		return
	}
	if err != nil {
		h.fail(w, r, fmt.Errorf("read batch %d: %w", id, err))
		return
	}
	jobs, err := h.q.DashboardBatchJobs(r.Context(), gen.DashboardBatchJobsParams{BatchID: id, AfterID: after, Max: int32(h.bound.page) + 1})
	if err != nil {
		h.fail(w, r, fmt.Errorf("list the batch's jobs: %w", err))
		return
	}
	data := batchPage{page: h.page(r, "batches", fmt.Sprintf("Batch %d", id)), Batch: b}
	if b.FinishedAt != nil {
		data.Succeeded, data.Failed = int(b.Succeeded.Int32), int(b.Failed.Int32)
		data.Cancelled, data.Deleted = int(b.Cancelled.Int32), int(b.Deleted.Int32)
	} else {
		data.Succeeded, data.Failed, data.Cancelled = int(b.NowSucceeded), int(b.NowFailed), int(b.NowCancelled)
		data.Pending = int(b.Seen) - data.Succeeded - data.Failed - data.Cancelled
		if data.Partial = b.Seen >= h.bound.scan; !data.Partial {
			data.Deleted = int(b.Total) - int(b.Seen)
		}
	}
	if len(jobs) > h.bound.page {
		jobs = jobs[:h.bound.page]
		data.Next = fmt.Sprintf("%s/batches/%d?after=%d", h.base, id, jobs[h.bound.page-1].ID)
	}
	data.Jobs = jobs
	h.render(w, r, http.StatusOK, "batch", data)
}
