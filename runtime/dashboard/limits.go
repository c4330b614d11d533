package dashboard

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
)

// limitRow is a limit key on the limits page.
type limitRow struct {
	gen.DashboardLimitsRow
	// Running and Waiting are counted up to the count bound.
	Running, Waiting count
}

type limitsPage struct {
	page
	Queue     string
	Keys      []limitRow
	Overrides []runtime.LimitOverride
	// Next is the next page's link; "" at the end.
	Next string
	// Rates are the rate keys (see docs/rate-limits.md), the first page's
	// worth; RatesMore says there are more.
	Rates     []runtime.RateInfo
	RatesMore bool
}

// limitsPage lists the limit keys a page at a time, along the keys' primary
// key, and the operators' limits, with the forms that set and clear them.
func (h *handler) limitsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	data := limitsPage{page: h.page(r, "limits", "Concurrency and rate limits"), Queue: q.Get("queue")}
	rows, err := h.q.DashboardLimits(r.Context(), gen.DashboardLimitsParams{
		Probe: int32(h.bound.count) + 1, Queue: opt(data.Queue),
		AfterQueue: q.Get("after_queue"), AfterKey: q.Get("after_key"), Max: int32(h.bound.page) + 1})
	if err != nil {
		h.fail(w, r, fmt.Errorf("list limit keys: %w", err))
		return
	}
	if len(rows) > h.bound.page {
		rows = rows[:h.bound.page]
		last := rows[h.bound.page-1]
		v := url.Values{"after_queue": {last.Queue}, "after_key": {last.LimitKey}}
		if data.Queue != "" {
			v.Set("queue", data.Queue)
		}
		data.Next = h.base + "/limits?" + v.Encode()
	}
	for _, row := range rows {
		data.Keys = append(data.Keys, limitRow{DashboardLimitsRow: row,
			Running: bounded(row.Running, h.bound.count), Waiting: bounded(row.Waiting, h.bound.count)})
	}
	data.Overrides, err = runtime.LimitOverrides(r.Context(), h.db, data.Queue)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	data.Rates, err = runtime.Rates(r.Context(), h.db, data.Queue, h.bound.page+1)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if len(data.Rates) > h.bound.page {
		data.Rates, data.RatesMore = data.Rates[:h.bound.page], true
	}
	h.render(w, r, http.StatusOK, "limits", data)
}

func (h *handler) setLimit(w http.ResponseWriter, r *http.Request) {
	h.limitAction(w, r, "set")
}

func (h *handler) clearLimit(w http.ResponseWriter, r *http.Request) {
	h.limitAction(w, r, "cleared")
}

// limitAction sets or clears an operator's limit: of the form's key of its
// queue, of every key of it (every_key), or of the queue's own limit (no
// key). Setting takes the form's limit, a whole number from 1.
func (h *handler) limitAction(w http.ResponseWriter, r *http.Request, what string) {
	f := r.PostForm
	queue, key, everyKey := f.Get("queue"), f.Get("key"), f.Get("every_key") != ""
	bad := func(format string, args ...any) {
		http.Error(w, "400 Bad Request: "+fmt.Sprintf(format, args...), http.StatusBadRequest)
	}
	switch msg := badQueueAnd(queue, "limit key", key, runtime.MaxGroupKeyBytes); {
	case msg != "":
		bad("%s", msg)
		return
	case everyKey && key != "":
		bad("give a key or every key, not both")
		return
	}
	n := 0
	if what == "set" {
		v, err := strconv.ParseInt(f.Get("limit"), 10, 64)
		if err != nil || v < 1 || v > math.MaxInt32 {
			bad("limit %q: want a whole number of jobs from 1 to %d (Clear removes an operator's limit)", f.Get("limit"), math.MaxInt32)
			return
		}
		n = int(v)
	}
	changed, err := h.changeLimit(r.Context(), queue, key, everyKey, n)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "pgtask dashboard: "+what+" limit", "queue", queue, "key", key, "every_key", everyKey,
		"limit", n, "changed", changed, "user", authUser(r))
	h.redirectBack(w, r, "limit-"+what, int64(changed), 0)
}

func (h *handler) changeLimit(ctx context.Context, queue, key string, everyKey bool, n int) (int, error) {
	if everyKey {
		return runtime.SetEveryKeyLimit(ctx, h.db, queue, n)
	}
	return runtime.SetLimit(ctx, h.db, queue, key, n)
}

func (h *handler) setRate(w http.ResponseWriter, r *http.Request) {
	h.rateAction(w, r, "set")
}

func (h *handler) clearRate(w http.ResponseWriter, r *http.Request) {
	h.rateAction(w, r, "cleared")
}

// rateAction sets or clears an operator's rate of the form's key of its
// queue ("" for the queue's own rate). Setting takes the form's rate as
// N/PERIOD (100/1m), as pgtask rates set does, and its burst (empty: the
// default).
func (h *handler) rateAction(w http.ResponseWriter, r *http.Request, what string) {
	f := r.PostForm
	queue, key := f.Get("queue"), f.Get("key")
	bad := func(format string, args ...any) {
		http.Error(w, "400 Bad Request: "+fmt.Sprintf(format, args...), http.StatusBadRequest)
	}
	if msg := badQueueAnd(queue, "rate key", key, runtime.MaxGroupKeyBytes); msg != "" {
		bad("%s", msg)
		return
	}
	n, per, burst := 0, time.Duration(0), 0
	if what == "set" {
		count, period, ok := strings.Cut(strings.TrimSpace(f.Get("rate")), "/")
		v, err := strconv.ParseInt(count, 10, 64)
		d, derr := time.ParseDuration(period)
		if !ok || err != nil || v < 1 || v > math.MaxInt32 || derr != nil || d < time.Millisecond {
			bad("rate %q: want N/PERIOD, N jobs from 1 to %d per a period of at least 1ms, such as 100/1m (Clear removes an operator's rate)", f.Get("rate"), math.MaxInt32)
			return
		}
		n, per = int(v), d
		if b := f.Get("burst"); b != "" {
			v, err := strconv.ParseInt(b, 10, 64)
			if err != nil || v < 1 || v > math.MaxInt32 {
				bad("burst %q: want a whole number of jobs from 1 to %d, or nothing for the default", b, math.MaxInt32)
				return
			}
			burst = int(v)
		}
	}
	changed, err := runtime.SetRate(r.Context(), h.db, queue, key, n, per, burst)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "pgtask dashboard: "+what+" rate", "queue", queue, "key", key,
		"rate", n, "per", per, "burst", burst, "changed", changed, "user", authUser(r))
	h.redirectBack(w, r, "rate-"+what, int64(changed), 0)
}

// badQueueAnd says what is wrong with a form's queue and its key (what
// names it; max bytes at most), or "" when nothing is.
func badQueueAnd(queue, what, key string, max int) string {
	switch {
	case queue == "":
		return "the form names no queue"
	case len(queue) > runtime.MaxQueueBytes:
		return fmt.Sprintf("the queue's name is %d bytes, more than the %d allowed", len(queue), runtime.MaxQueueBytes)
	case len(key) > max:
		return fmt.Sprintf("the %s is %d bytes, more than the %d allowed", what, len(key), max)
	}
	return ""
}
