package runtime_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
)

// Rates set for one enqueue, and changed at run time for every worker at
// once, without a deploy.
func ExampleSetRate() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// At most 100 calls a minute to acme, at most 20 of them at once.
	req := runtime.EnqueueRequest{Kind: "call_partner", Payload: []byte(`{"path":"/orders"}`)}
	req.Apply(runtime.WithQueue("outbound"), runtime.WithRate("acme", 100, time.Minute), runtime.WithRateBurst(20))
	if _, err := runtime.Enqueue(ctx, pool, req); err != nil {
		log.Fatal(err)
	}

	// acme raised our quota: 600 a minute, in bursts of 50.
	if _, err := runtime.SetRate(ctx, pool, "outbound", "acme", 600, time.Minute, 50); err != nil {
		log.Fatal(err)
	}
	// Back to the rate the task declares.
	if _, err := runtime.SetRate(ctx, pool, "outbound", "acme", 0, 0, 0); err != nil {
		log.Fatal(err)
	}

	keys, err := runtime.Rates(ctx, pool, "outbound", 0)
	if err != nil {
		log.Fatal(err)
	}
	for _, k := range keys {
		log.Printf("partner %s: %d per %s, %.1f tokens, %d waiting", k.Key, k.Rate, k.Per, k.Tokens, k.Waiting)
	}
}
