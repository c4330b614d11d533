package ledger_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgtask/pgtask/examples/ledger"
	"github.com/pgtask/pgtask/runtime"
)

// Enqueue through your own pgx.Tx and the job is part of your transaction:
// it exists, and will run, only if the transaction commits.
func ExampleEnqueueDeposit_inTransaction() {
	pool, _ := database()
	defer pool.Close()
	ctx := context.Background()

	tx, err := pool.Begin(ctx)
	check(err)
	rolledBack, err := ledger.EnqueueDeposit(ctx, tx, ledger.Deposit{Account: "alice", Cents: 100})
	check(err)
	check(tx.Rollback(ctx))

	tx, err = pool.Begin(ctx)
	check(err)
	committed, err := ledger.EnqueueDeposit(ctx, tx, ledger.Deposit{Account: "alice", Cents: 200})
	check(err)
	check(tx.Commit(ctx))

	_, err = runtime.GetJob(ctx, pool, rolledBack)
	fmt.Println("rolled back:", errors.Is(err, runtime.ErrJobNotFound))
	job, err := runtime.GetJob(ctx, pool, committed)
	check(err)
	fmt.Println("committed:", job.Status)

	// Output:
	// rolled back: true
	// committed: queued
}
