package ledger_test

import (
	"context"
	"fmt"

	"github.com/pgtask/pgtask/examples/ledger"
	"github.com/pgtask/pgtask/examples/ledger/ledgerdb"
	"github.com/pgtask/pgtask/runtime"
)

// A day's deposits enqueued as a batch, with a Reconcile that runs once
// all of them have finished. The callback is a typed task too: the
// generated RequestReconcile validates it and makes the request the
// batch's options take. The batch, its jobs and its callback are inserted
// in one statement (pass a pgx.Tx to make it part of yours).
func ExampleEnqueueDepositBatch() {
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
	check(ledger.HandleReconcile(worker, func(ctx context.Context, job *runtime.Job, r ledger.Reconcile) error {
		s, err := runtime.BatchSummaryOf(job)
		if err != nil {
			return runtime.NoRetry(err)
		}
		fmt.Printf("%s: %d of %d deposits applied, %d failed\n", r.Day, s.Succeeded, s.Total, s.Failed)
		return nil
	}))

	done, err := ledger.RequestReconcile(ledger.Reconcile{Day: "2026-11-27"})
	check(err)
	batch, _, err := ledger.EnqueueDepositBatch(ctx, pool, []ledger.Deposit{
		{Account: "erin", Cents: 500}, {Account: "frank", Cents: 250}, {Account: "erin", Cents: 75},
	}, runtime.BatchOptions{OnFinish: &done})
	check(err)

	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- worker.Run(runCtx) }()
	b, err := runtime.GetBatch(ctx, pool, batch)
	check(err)
	waitFinished(pool, b.OnFinish)
	stop()
	check(<-stopped)

	// Output:
	// 2026-11-27: 3 of 3 deposits applied, 0 failed
}
