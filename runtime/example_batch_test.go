package runtime_test

import (
	"context"
	"encoding/json"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
)

// A batch of import jobs, with a callback once all have finished and one
// on the first failure, enqueued in the caller's transaction.
func ExampleEnqueueBatch() {
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
	rows := []json.RawMessage{json.RawMessage(`{"row": 1}`), json.RawMessage(`{"row": 2}`)}

	done := runtime.EnqueueRequest{Kind: "import_done", Payload: []byte(`{"import": 42}`)}
	failed := runtime.EnqueueRequest{Kind: "import_failed", Payload: []byte(`{"import": 42}`)}
	failed.Apply(runtime.WithQueue("alerts"))

	var reqs []runtime.EnqueueRequest
	for _, row := range rows {
		reqs = append(reqs, runtime.EnqueueRequest{Kind: "import_row", Payload: row})
	}
	batch, jobIDs, err := runtime.EnqueueBatch(ctx, tx, reqs, runtime.BatchOptions{OnFinish: &done, OnFailure: &failed})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	log.Printf("batch %d: jobs %v", batch, jobIDs)
}

// handleImportDone is the handler of the batch's OnFinish callback.
func handleImportDone(ctx context.Context, job *runtime.Job) error {
	s, err := runtime.BatchSummaryOf(job)
	if err != nil {
		return runtime.NoRetry(err)
	}
	log.Printf("import batch %d: %d of %d rows imported, %d failed, %d cancelled",
		s.BatchID, s.Succeeded, s.Total, s.Failed, s.Cancelled)
	return nil
}

var _ = runtime.Registration{Kind: "import_done", Handler: handleImportDone}
