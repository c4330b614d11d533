package ledger_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgtask/pgtask/examples/ledger"
	"github.com/pgtask/pgtask/examples/ledger/ledgerdb"
	"github.com/pgtask/pgtask/runtime"
)

// In a test, WorkOne runs one attempt in the calling goroutine and returns
// the job as the attempt left it, so each step can be checked: here a
// deposit that succeeds, then one the handler refuses for good.
func Example_workOne() {
	pool, poolConfig := database()
	defer pool.Close()
	ctx := context.Background()

	worker, err := runtime.NewWorker(ctx, poolConfig, runtime.Config{Logger: quiet})
	check(err)
	defer worker.Close()
	check(ledger.HandleDeposit(worker, func(ctx context.Context, job *runtime.Job, d ledger.Deposit) error {
		if d.Account == "closed" {
			return runtime.NoRetry(errors.New("account is closed"))
		}
		return ledgerdb.New(job.Tx()).AddEntry(ctx, ledgerdb.AddEntryParams{
			Account: d.Account, Cents: d.Cents, JobID: int64(job.ID),
		})
	}))
	_, err = ledger.EnqueueDepositMany(ctx, pool, []ledger.Deposit{
		{Account: "alice", Cents: 100}, {Account: "closed", Cents: 200},
	})
	check(err)

	for {
		job, err := worker.WorkOne(ctx)
		check(err)
		if job == nil {
			fmt.Println("nothing left to run")
			break
		}
		fmt.Printf("attempt %d: %s", job.Attempts, job.Status)
		for _, e := range job.Errors {
			fmt.Printf(" (%s)", e.Error)
		}
		fmt.Println()
	}

	// Output:
	// attempt 1: succeeded
	// attempt 1: failed (account is closed)
	// nothing left to run
}
