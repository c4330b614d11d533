package ledger_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/pgtask/pgtask/examples/ledger"
	"github.com/pgtask/pgtask/runtime"
)

// Jobs with the same group key (Deposit's Account, tagged task:"group") run
// one at a time, in the order they were enqueued, even on a worker that runs
// many jobs at once; jobs of different groups run in parallel.
func ExampleEnqueueDepositMany() {
	pool, poolConfig := database()
	defer pool.Close()
	ctx := context.Background()

	worker, err := runtime.NewWorker(ctx, poolConfig, runtime.Config{
		Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Concurrency: 4}},
		Logger: quiet,
	})
	check(err)
	defer worker.Close()
	var mu sync.Mutex
	applied := map[string][]int64{}
	check(ledger.HandleDeposit(worker, func(ctx context.Context, job *runtime.Job, d ledger.Deposit) error {
		mu.Lock()
		defer mu.Unlock()
		applied[d.Account] = append(applied[d.Account], d.Cents)
		return nil
	}))

	// One statement inserts them all; each account's run in slice order.
	ids, err := ledger.EnqueueDepositMany(ctx, pool, []ledger.Deposit{
		{Account: "alice", Cents: 1}, {Account: "bob", Cents: 10},
		{Account: "alice", Cents: 2}, {Account: "bob", Cents: 20},
		{Account: "alice", Cents: 3}, {Account: "bob", Cents: 30},
		{Account: "alice", Cents: 4}, {Account: "bob", Cents: 40},
	})
	check(err)

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- worker.Run(runCtx) }()
	waitFinished(pool, ids...)
	stop()
	check(<-done)

	fmt.Println("alice:", applied["alice"])
	fmt.Println("bob:  ", applied["bob"])

	// Output:
	// alice: [1 2 3 4]
	// bob:   [10 20 30 40]
}
