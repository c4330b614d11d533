package runtime_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
)

// Limits changed at run time, for every worker at once, without a deploy.
func ExampleSetLimit() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// acme may take 10 calls at once; every other partner of the queue 3.
	if _, err := runtime.SetLimit(ctx, pool, "outbound", "acme", 10); err != nil {
		log.Fatal(err)
	}
	if _, err := runtime.SetEveryKeyLimit(ctx, pool, "outbound", 3); err != nil {
		log.Fatal(err)
	}
	// Back to the limit the task declares.
	if _, err := runtime.SetLimit(ctx, pool, "outbound", "acme", 0); err != nil {
		log.Fatal(err)
	}

	keys, err := runtime.Limits(ctx, pool, "outbound", 0)
	if err != nil {
		log.Fatal(err)
	}
	for _, k := range keys {
		log.Printf("partner %s: %d running, %d waiting, limit %d", k.Key, k.Running, k.Waiting, k.Limit)
	}
}
