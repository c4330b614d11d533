// Package ledger is a small bank ledger that shows pgtask's main uses as
// runnable examples (example_*_test.go, checked by go test): declaring and
// enqueueing tasks, a handler whose writes commit with its job, FIFO groups,
// typed results, enqueueing inside the caller's transaction, a workflow
// whose steps read their parents' results, and a batch with a callback.
//
// Its tasks are declared here; `go generate` writes their typed functions to
// pgtask_gen.go. The handlers write the ledger's own table
// (schema.sql) through queries sqlc generates from queries.sql into package
// ledgerdb, run on the job's transaction.
package ledger

import (
	_ "embed"

	"github.com/pgtask/pgtask/runtime"
)

//go:generate go run github.com/pgtask/pgtask/cmd/pgtask gen

// Deposit credits an account. An account's deposits are applied one at a
// time, in the order they were enqueued; different accounts' run in
// parallel.
type Deposit struct {
	runtime.Task `task:"deposit"`
	Account      string `json:"account" task:"group" validate:"required"`
	Cents        int64  `json:"cents" validate:"gt=0"`
}

// Statement totals an account. It is in the account's group, so it runs
// after the deposits enqueued before it; its handler returns the Total,
// stored with the job.
type Statement struct {
	runtime.TaskWithResult[Total] `task:"statement"`
	Account                       string `json:"account" task:"group" validate:"required"`
}

// Total is a Statement's result.
type Total struct {
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

// Compare compares two accounts' totals, as a step of a workflow: its
// inputs are set from the steps of two Statements, which makes them its
// parents, and it starts once both have succeeded. Its handler reads their
// results, typed; a step whose result is not a Total cannot be its input.
type Compare struct {
	runtime.TaskWithResult[string] `task:"compare"`
	First                          runtime.Input[Total] `json:"first"`
	Second                         runtime.Input[Total] `json:"second"`
}

// Reconcile closes a day's deposits, enqueued together as a batch: it is
// the batch's OnFinish callback, which runs once all of them have
// finished, and its handler reads the batch's counts with
// runtime.BatchSummaryOf. A callback runs when its batch says, so it has no
// group.
type Reconcile struct {
	runtime.Task `task:"reconcile"`
	Day          string `json:"day" validate:"required"`
}

// Schema creates the ledger's table; apply it after runtime.Migrate.
//
//go:embed schema.sql
var Schema string
