package runtime_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
)

// Tenants' shares changed at run time, for every worker at once, without
// a deploy.
func ExampleSetTenantWeight() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// acme pays for three times the share of the queue's other accounts.
	if _, err := runtime.SetTenantWeight(ctx, pool, "renders", "acme", 3); err != nil {
		log.Fatal(err)
	}
	// A job enqueued by hand names its tenant; the queue takes turns.
	req := runtime.EnqueueRequest{Kind: "render", Payload: []byte(`{"page": 1}`)}
	req.Apply(runtime.WithQueue("renders"), runtime.WithTenant("globex"))
	if _, err := runtime.Enqueue(ctx, pool, req); err != nil {
		log.Fatal(err)
	}

	tenants, err := runtime.FairTenants(ctx, pool, "renders", 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range tenants {
		log.Printf("tenant %s: weight %d, %d queued", t.Tenant, t.Weight, t.Queued)
	}
}
