package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/dashboard"
)

// The tenants page lists the fair queues' tenants by queued jobs, and its
// form sets a tenant's weight, as a POST guarded like every action; a
// read-only dashboard shows no form.
func TestTenantsPage(t *testing.T) {
	t.Parallel()
	s := seed(t)
	ctx := context.Background()
	var reqs []runtime.EnqueueRequest
	for i := range 5 {
		r := runtime.EnqueueRequest{Kind: "render", Payload: []byte(`{}`)}
		r.Apply(runtime.WithQueue("renders"), runtime.WithTenant([]string{"acme", "acme", "acme", "beta", ""}[i]))
		reqs = append(reqs, r)
	}
	if _, err := runtime.EnqueueMany(ctx, s.pool, reqs); err != nil {
		t.Fatal(err)
	}
	c := newDashboard(t, s, dashboard.Options{})
	body := c.get("/tenants")
	if !strings.Contains(body, `<a href="/tenants" aria-current="page">Tenants</a>`) {
		t.Errorf("the tenants page is not the current one in the navigation")
	}
	got := rows(body)
	want := [][]string{{"Queue", "Tenant", "Weight", "Queued"},
		{"renders", "acme", "1", "3"}, {"renders", `("")`, "1", "1"}, {"renders", "beta", "1", "1"}}
	if len(got) < 4 || !slices.EqualFunc(got[:4], want, slices.Equal) {
		t.Errorf("tenants table %q, want %q", got, want)
	}

	back := "/tenants?queue=renders"
	f := url.Values{"csrf": {c.token(back)}, "back": {back}, "queue": {"renders"}, "tenant": {"beta"}, "weight": {"4"}}
	resp, page := c.post("/tenants/weight", f)
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || loc.Path != "/tenants" || loc.Query().Get("done") != "weight-set" {
		t.Fatalf("POST /tenants/weight: %s to %q %q", resp.Status, loc, page)
	}
	if page := text(c.get(loc.String())); !strings.Contains(page, "The tenant's weight is 4 (it was 1)") {
		t.Errorf("the page after the form does not say what it did:\n%s", page)
	}
	infos, err := runtime.FairTenants(ctx, s.pool, "renders", 0)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(infos, func(ti runtime.TenantInfo) bool { return ti.Tenant == "beta" }); i < 0 || infos[i].Weight != 4 {
		t.Errorf("beta after the form: %+v", infos)
	}
	f.Set("weight", "1001")
	if resp, _ := c.post("/tenants/weight", f); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a weight of 1001: %s, want 400", resp.Status)
	}

	ro := newDashboard(t, s, dashboard.Options{ReadOnly: true})
	if body := ro.get("/tenants"); strings.Contains(body, "/tenants/weight") {
		t.Errorf("the read-only tenants page shows the weight form")
	}
}
