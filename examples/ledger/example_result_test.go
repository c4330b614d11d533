package ledger_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgtask/pgtask/examples/ledger"
	"github.com/pgtask/pgtask/examples/ledger/ledgerdb"
	"github.com/pgtask/pgtask/runtime"
)

// A task that embeds runtime.TaskWithResult[R] has a handler that returns an
// R; it is stored with the job, and the generated Get<Task>Result reads it
// back, typed. The statement is in alice's group, so it runs after the
// deposits enqueued before it.
func ExampleGetStatementResult() {
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
		cents, err := ledgerdb.New(job.Tx()).AccountTotal(ctx, s.Account)
		return ledger.Total{Account: s.Account, Cents: cents}, err
	}))

	_, err = ledger.EnqueueDepositMany(ctx, pool, []ledger.Deposit{
		{Account: "alice", Cents: 100}, {Account: "alice", Cents: 250},
	})
	check(err)
	id, err := ledger.EnqueueStatement(ctx, pool, ledger.Statement{Account: "alice"})
	check(err)

	// Before the job has succeeded there is no result, and the status says why.
	_, status, err := ledger.GetStatementResult(ctx, pool, id)
	fmt.Println(status, errors.Is(err, runtime.ErrNoResult))

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- worker.Run(runCtx) }()
	waitFinished(pool, id)
	stop()
	check(<-done)

	total, status, err := ledger.GetStatementResult(ctx, pool, id)
	check(err)
	fmt.Printf("%s: %s has %d cents\n", status, total.Account, total.Cents)

	// Output:
	// queued true
	// succeeded: alice has 350 cents
}
