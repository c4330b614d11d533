package ledger_test

import (
	"context"
	"fmt"

	"github.com/pgtask/pgtask/examples/ledger"
	"github.com/pgtask/pgtask/examples/ledger/ledgerdb"
	"github.com/pgtask/pgtask/runtime"
)

// A workflow: two statements, and a comparison that starts once both have
// succeeded and reads their totals through its inputs. The generated
// Add<Task> functions add the steps; setting Compare's inputs from the
// statements' outputs makes them its parents. The whole workflow is
// enqueued in one statement (pass a pgx.Tx to make it part of yours), and
// GetWorkflow reads its state in one query.
func ExampleAddCompare() {
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
	check(ledger.HandleCompare(worker, func(ctx context.Context, job *runtime.Job, c ledger.Compare) (string, error) {
		first, err := c.First.Get(ctx, job)
		if err != nil {
			return "", err
		}
		second, err := c.Second.Get(ctx, job)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s has %d cents more than %s", first.Account, first.Cents-second.Cents, second.Account), nil
	}))

	_, err = ledger.EnqueueDepositMany(ctx, pool, []ledger.Deposit{
		{Account: "carol", Cents: 300}, {Account: "dave", Cents: 120},
	})
	check(err)

	wf := runtime.NewWorkflow("month-end")
	carol := ledger.AddStatement(wf, ledger.Statement{Account: "carol"})
	dave := ledger.AddStatement(wf, ledger.Statement{Account: "dave"})
	cmp := ledger.AddCompare(wf, ledger.Compare{First: carol.Output(), Second: dave.Output()})
	id, err := wf.Enqueue(ctx, pool)
	check(err)

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- worker.Run(runCtx) }()
	waitFinished(pool, cmp.JobID())
	stop()
	check(<-done)

	text, _, err := ledger.GetCompareResult(ctx, pool, cmp.JobID())
	check(err)
	fmt.Println(text)
	state, err := runtime.GetWorkflow(ctx, pool, id)
	check(err)
	fmt.Printf("%s: %s, %d of %d steps succeeded\n", state.Name, state.Status, state.Succeeded, state.Steps)

	// Output:
	// carol has 180 cents more than dave
	// month-end: succeeded, 3 of 3 steps succeeded
}
