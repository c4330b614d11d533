package ledger_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgtask/pgtask/examples/ledger"
	"github.com/pgtask/pgtask/examples/ledger/ledgerdb"
	"github.com/pgtask/pgtask/runtime"
)

// A handler writes through job.Tx(), the transaction that holds the job's
// lock: its writes commit if and only if the job succeeds. Here the second
// deposit's entry is written, then the handler fails, so the entry is rolled
// back with the attempt.
func ExampleHandleDeposit() {
	pool, poolConfig := database()
	defer pool.Close()
	ctx := context.Background()

	worker, err := runtime.NewWorker(ctx, poolConfig, runtime.Config{Logger: quiet})
	check(err)
	defer worker.Close()
	check(ledger.HandleDeposit(worker, func(ctx context.Context, job *runtime.Job, d ledger.Deposit) error {
		err := ledgerdb.New(job.Tx()).AddEntry(ctx, ledgerdb.AddEntryParams{
			Account: d.Account, Cents: d.Cents, JobID: int64(job.ID),
		})
		if err != nil {
			return err
		}
		if d.Cents > 1_000_00 {
			// Another attempt would not help: fail the job now.
			return runtime.NoRetry(errors.New("deposits over $1000 need a review"))
		}
		return nil
	}))

	small, err := ledger.EnqueueDeposit(ctx, pool, ledger.Deposit{Account: "alice", Cents: 250_00})
	check(err)
	large, err := ledger.EnqueueDeposit(ctx, pool, ledger.Deposit{Account: "bob", Cents: 5_000_00})
	check(err)

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- worker.Run(runCtx) }()
	waitFinished(pool, small, large)
	stop()
	check(<-done)

	for _, id := range []runtime.JobID{small, large} {
		job, err := runtime.GetJob(ctx, pool, id)
		check(err)
		fmt.Printf("deposit to %s: %s\n", job.Group, job.Status) // the group is the account
	}
	entries, err := ledgerdb.New(pool).ListEntries(ctx)
	check(err)
	for _, e := range entries {
		fmt.Printf("entry: %s %+d\n", e.Account, e.Cents)
	}

	// Output:
	// deposit to alice: succeeded
	// deposit to bob: failed
	// entry: alice +25000
}
