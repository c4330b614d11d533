package ledger_test

import (
	"context"
	"fmt"

	"github.com/pgtask/pgtask/examples/ledger"
	"github.com/pgtask/pgtask/runtime"
)

// Declare a task as a struct that embeds runtime.Task (see ledger.go), run
// go generate, and enqueue it with the generated function. The value is
// validated first: an invalid one is refused before anything is inserted.
func ExampleEnqueueDeposit() {
	pool, _ := database()
	defer pool.Close()
	ctx := context.Background()

	id, err := ledger.EnqueueDeposit(ctx, pool, ledger.Deposit{Account: "alice", Cents: 500})
	check(err)
	job, err := runtime.GetJob(ctx, pool, id)
	check(err)
	fmt.Printf("%s job in queue %q, group %q: %s\n", job.Kind, job.Queue, job.Group, job.Status)

	_, err = ledger.EnqueueDeposit(ctx, pool, ledger.Deposit{Account: "alice", Cents: -5})
	fmt.Println(err)

	// Output:
	// deposit job in queue "default", group "alice": queued
	// enqueue: invalid deposit: cents fails gt=0
}
