package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pgtask/pgtask/examples/ledger"
	"github.com/pgtask/pgtask/examples/ledger/ledgerdb"
	"github.com/pgtask/pgtask/runtime"
)

// The generated Wait<Task>Result blocks until the job finishes, woken by a
// notification the worker sends with the job's outcome, and returns its
// result, or the error of a job that failed or was cancelled.
// Get<Task>Results reads many jobs' results in one round trip.
func ExampleWaitStatementResult() {
	pool, poolConfig := database()
	defer pool.Close()
	ctx := context.Background()

	worker, err := runtime.NewWorker(ctx, poolConfig, runtime.Config{Logger: quiet})
	check(err)
	defer worker.Close()
	check(ledger.HandleDeposit(worker, func(ctx context.Context, job *runtime.Job, d ledger.Deposit) error {
		return ledgerdb.New(job.Tx()).AddEntry(ctx, ledgerdb.AddEntryParams{
			Account: d.Account, Cents: d.Cents, JobID: int64(job.ID),
		})
	}))
	check(ledger.HandleStatement(worker, func(ctx context.Context, job *runtime.Job, s ledger.Statement) (ledger.Total, error) {
		if s.Account == "mallory" {
			return ledger.Total{}, runtime.NoRetry(errors.New("account closed"))
		}
		cents, err := ledgerdb.New(job.Tx()).AccountTotal(ctx, s.Account)
		return ledger.Total{Account: s.Account, Cents: cents}, err
	}))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- worker.Run(runCtx) }()

	_, err = ledger.EnqueueDeposit(ctx, pool, ledger.Deposit{Account: "bob", Cents: 700})
	check(err)
	ids, err := ledger.EnqueueStatementMany(ctx, pool, []ledger.Statement{{Account: "bob"}, {Account: "mallory"}})
	check(err)

	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	total, err := ledger.WaitStatementResult(waitCtx, pool, ids[0])
	check(err)
	fmt.Printf("%s has %d cents\n", total.Account, total.Cents)
	_, err = ledger.WaitStatementResult(waitCtx, pool, ids[1])
	fmt.Println(errors.Is(err, runtime.ErrJobFailed), err)

	results, err := ledger.GetStatementResults(ctx, pool, ids)
	check(err)
	for _, r := range results {
		fmt.Println(r.Status, r.Value.Cents, r.Err != nil)
	}
	stop()
	check(<-done)

	// Output:
	// bob has 700 cents
	// true job 3 (statement) failed: account closed
	// succeeded 700 false
	// failed 0 true
}
