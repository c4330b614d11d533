package dashboard

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/pgtask/pgtask/runtime"
)

type tenantsPage struct {
	page
	Queue   string
	Queues  []runtime.FairQueue
	Tenants []runtime.TenantInfo
	// Top is how many tenants of each queue the page shows at most.
	Top int
}

// tenantsPage lists the fair queues and, of each (or of the queue asked
// for), the tenants with the most queued jobs, with their weights and the
// form that sets one.
func (h *handler) tenantsPage(w http.ResponseWriter, r *http.Request) {
	data := tenantsPage{page: h.page(r, "tenants", "Fair queues"), Queue: r.URL.Query().Get("queue"), Top: h.bound.page}
	var err error
	if data.Queues, err = runtime.FairQueues(r.Context(), h.db); err != nil {
		h.fail(w, r, err)
		return
	}
	if data.Tenants, err = runtime.FairTenants(r.Context(), h.db, data.Queue, data.Top); err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "tenants", data)
}

// setTenantWeight sets the form's tenant's weight in its queue: a whole
// number from 1 to runtime.MaxTenantWeight (1: the default).
func (h *handler) setTenantWeight(w http.ResponseWriter, r *http.Request) {
	f := r.PostForm
	queue, tenant := f.Get("queue"), f.Get("tenant")
	bad := func(format string, args ...any) {
		http.Error(w, "400 Bad Request: "+fmt.Sprintf(format, args...), http.StatusBadRequest)
	}
	if msg := badQueueAnd(queue, "tenant", tenant, runtime.MaxTenantBytes); msg != "" {
		bad("%s", msg)
		return
	}
	n, err := strconv.Atoi(f.Get("weight"))
	if err != nil || n < 1 || n > runtime.MaxTenantWeight {
		bad("weight %q: want a whole number from 1 (the default) to %d", f.Get("weight"), runtime.MaxTenantWeight)
		return
	}
	old, err := runtime.SetTenantWeight(r.Context(), h.db, queue, tenant, n)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "pgtask dashboard: set tenant weight", "queue", queue, "tenant", tenant,
		"weight", n, "previous", old, "user", authUser(r))
	h.redirectBack(w, r, "weight-set", int64(n), int64(old))
}
