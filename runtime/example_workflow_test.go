package runtime_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
)

// A workflow without generated code: requests added as steps, with
// dependencies that carry no data, enqueued in the caller's transaction.
// The clean-up step runs once the import has finished, whatever its
// outcome; the report only after it succeeded.
func ExampleWorkflow_Add() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	step := func(kind string) runtime.EnqueueRequest {
		return runtime.EnqueueRequest{Kind: kind, Payload: []byte(`{"import": 42}`)}
	}

	wf := runtime.NewWorkflow("import 42")
	fetch := wf.Add(step("fetch"))
	load := wf.Add(step("load"), runtime.After(fetch), runtime.WithQueue("db"))
	wf.Add(step("report"), runtime.After(load))
	wf.Add(step("cleanup"), runtime.AfterAnyway(load), runtime.AfterAnyway(fetch))
	id, err := wf.Enqueue(ctx, tx)
	if err != nil {
		log.Fatal(err)
	}

	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	log.Printf("workflow %d: jobs %v", id, wf.JobIDs())
}
