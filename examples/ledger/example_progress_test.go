package ledger_test

import (
	"context"
	"fmt"

	"github.com/pgtask/pgtask/examples/ledger"
	"github.com/pgtask/pgtask/runtime"
)

// A handler reports how far it has got; other sessions read the progress
// at once, while the job's transaction is still open, and it stays once the
// job has finished.
func Example_progress() {
	pool, poolConfig := database()
	defer pool.Close()
	ctx := context.Background()

	worker, err := runtime.NewWorker(ctx, poolConfig, runtime.Config{Logger: quiet})
	check(err)
	defer worker.Close()
	reported, finish := make(chan struct{}), make(chan struct{})
	check(ledger.HandleDeposit(worker, func(ctx context.Context, job *runtime.Job, d ledger.Deposit) error {
		err := job.ReportProgressValue(ctx, 50, "booking the entry", map[string]string{"account": d.Account})
		if err != nil {
			return err
		}
		close(reported)
		<-finish
		return job.ReportProgress(ctx, 100, "booked")
	}))
	id, err := ledger.EnqueueDeposit(ctx, pool, ledger.Deposit{Account: "alice", Cents: 100})
	check(err)
	worked := make(chan error, 1)
	go func() {
		_, err := worker.WorkOne(ctx)
		worked <- err
	}()

	<-reported
	p, err := runtime.GetJobProgress(ctx, pool, id)
	check(err)
	fmt.Printf("while it runs: %v%% %s %s\n", p.Percent, p.Message, p.Value)
	close(finish)
	check(<-worked)
	p, err = runtime.GetJobProgress(ctx, pool, id)
	check(err)
	fmt.Printf("once it is done: %v%% %s (attempt %d)\n", p.Percent, p.Message, p.Attempt)

	// Output:
	// while it runs: 50% booking the entry {"account": "alice"}
	// once it is done: 100% booked (attempt 1)
}
