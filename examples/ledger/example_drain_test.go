package ledger_test

import (
	"context"
	"fmt"

	"github.com/pgtask/pgtask/examples/ledger"
	"github.com/pgtask/pgtask/examples/ledger/ledgerdb"
	"github.com/pgtask/pgtask/runtime"
)

// In a test, Drain works what was enqueued in the calling goroutine: every
// job that can run now, until none is left, with the handlers and settings
// the worker was given. There is nothing to wait for afterwards.
func Example_drain() {
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
	_, err = ledger.EnqueueDepositMany(ctx, pool, []ledger.Deposit{
		{Account: "alice", Cents: 100}, {Account: "alice", Cents: 200}, {Account: "bob", Cents: 300},
	})
	check(err)

	ran, err := worker.Drain(ctx)
	check(err)
	fmt.Println("attempts run:", ran)
	entries, err := ledgerdb.New(pool).ListEntries(ctx)
	check(err)
	for _, e := range entries {
		fmt.Printf("entry: %s %+d\n", e.Account, e.Cents)
	}

	// Output:
	// attempts run: 3
	// entry: alice +100
	// entry: alice +200
	// entry: bob +300
}
