package cli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// pgtask tenants lists a fair queue's tenants by queued jobs, sets a
// tenant's weight, and makes a queue fair or not; pgtask stats shows the
// top tenants.
func TestTenantsCommand(t *testing.T) {
	t.Parallel()
	url := pgtasktest.NewDatabase(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var reqs []runtime.EnqueueRequest
	for i := range 7 {
		tenant := "acme"
		if i >= 5 {
			tenant = "beta"
		}
		r := runtime.EnqueueRequest{Kind: "render", Payload: []byte(`{}`)}
		r.Apply(runtime.WithQueue("renders"), runtime.WithTenant(tenant))
		reqs = append(reqs, r)
	}
	if _, err := runtime.EnqueueMany(ctx, pool, reqs); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := run(t, "tenants", "-database-url", url)
	if code != 0 || !strings.Contains(out, "renders  acme    1       5") || !strings.Contains(out, "renders  beta    1       2") {
		t.Fatalf("tenants: code %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}
	code, out, errOut = run(t, "tenants", "weight", "-database-url", url, "-queue", "renders", "-tenant", "beta", "4")
	if code != 0 || !strings.Contains(out, "set the weight of tenant beta of queue renders to 4 (it was 1)") {
		t.Fatalf("tenants weight: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	infos, err := runtime.FairTenants(ctx, pool, "renders", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[1].Tenant != "beta" || infos[1].Weight != 4 {
		t.Fatalf("tenants after the weight: %+v", infos)
	}
	code, out, _ = run(t, "stats", "-database-url", url)
	if code != 0 || !strings.Contains(out, "tenants of fair queues") || !strings.Contains(out, "beta") {
		t.Fatalf("stats: code %d, stdout:\n%s", code, out)
	}
	for _, bad := range [][]string{
		{"tenants", "weight", "-database-url", url, "-queue", "renders", "-tenant", "beta", "1001"},
		{"tenants", "weight", "-database-url", url, "-tenant", "beta", "2"},
		{"tenants", "fair", "-database-url", url, "-queue", "renders", "maybe"},
	} {
		if code, _, errOut := run(t, bad...); code != 2 || errOut == "" {
			t.Errorf("%v: code %d, stderr %q; want a usage error", bad, code, errOut)
		}
	}
	code, out, errOut = run(t, "tenants", "fair", "-database-url", url, "-queue", "renders", "off")
	if code != 0 || !strings.Contains(out, "queue renders is not fair") {
		t.Fatalf("tenants fair off: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	qs, err := runtime.FairQueues(ctx, pool)
	if err != nil || len(qs) != 0 {
		t.Fatalf("fair queues after off: %v, %v", qs, err)
	}
}
