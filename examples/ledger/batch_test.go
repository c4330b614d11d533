package ledger_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/examples/ledger"
	"github.com/pgtask/pgtask/examples/ledger/ledgerdb"
	"github.com/pgtask/pgtask/runtime"
)

// Typed batches of a task without a result (Deposit) and of one with a
// result (Statement), each with a typed OnFinish callback (Reconcile), run
// by three workers at once: each callback runs once, with its batch's
// counts. Bad input is refused before anything is inserted.
func TestTypedBatchesRunTheirCallbacksOnce(t *testing.T) {
	pool, poolConfig := testDatabase(t)
	ctx := context.Background()

	// Refused, with nothing inserted: an invalid job at index 2, an invalid
	// callback, and a grouped task as a callback.
	deposits := []ledger.Deposit{{Account: "a", Cents: 1}, {Account: "b", Cents: 2}, {Account: "c"}, {Account: "d", Cents: 4}}
	_, _, err := ledger.EnqueueDepositBatch(ctx, pool, deposits, runtime.BatchOptions{})
	var ee *runtime.EnqueueError
	const wantErr = "enqueue (item 2 of the batch): invalid deposit: cents fails gt=0"
	if !errors.As(err, &ee) || ee.Index != 2 || err.Error() != wantErr {
		t.Fatalf("a batch with an invalid deposit at index 2: %v; want an *EnqueueError: %s", err, wantErr)
	}
	if _, err := ledger.RequestReconcile(ledger.Reconcile{}); err == nil || !strings.Contains(err.Error(), "day") {
		t.Fatalf("a Reconcile without a day: %v; want a validation error naming it", err)
	}
	grouped, err := ledger.RequestDeposit(ledger.Deposit{Account: "a", Cents: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = ledger.EnqueueStatementBatch(ctx, pool, []ledger.Statement{{Account: "a"}}, runtime.BatchOptions{OnFinish: &grouped})
	if !errors.As(err, &ee) || ee.Index != runtime.BatchOnFinish {
		t.Fatalf("a grouped task as a callback: %v; want an *EnqueueError naming the OnFinish callback", err)
	}
	if n, err := runtime.CountJobs(ctx, pool, runtime.JobFilter{}); err != nil || n != 0 {
		t.Fatalf("after the refused batches: %d jobs (err %v); want none", n, err)
	}

	var mu sync.Mutex
	calls := map[string][]runtime.BatchSummary{}
	var workers []*runtime.Worker
	for range 3 {
		w, err := runtime.NewWorker(ctx, poolConfig, runtime.Config{Logger: quiet, MaintenanceInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		err = ledger.HandleDeposit(w, func(ctx context.Context, job *runtime.Job, d ledger.Deposit) error {
			if d.Account == "closed" {
				return runtime.NoRetry(errors.New("the account is closed"))
			}
			return ledgerdb.New(job.Tx()).AddEntry(ctx, ledgerdb.AddEntryParams{Account: d.Account, Cents: d.Cents, JobID: int64(job.ID)})
		})
		if err != nil {
			t.Fatal(err)
		}
		err = ledger.HandleStatement(w, func(ctx context.Context, job *runtime.Job, s ledger.Statement) (ledger.Total, error) {
			cents, err := ledgerdb.New(job.Tx()).AccountTotal(ctx, s.Account)
			return ledger.Total{Account: s.Account, Cents: cents}, err
		})
		if err != nil {
			t.Fatal(err)
		}
		err = ledger.HandleReconcile(w, func(ctx context.Context, job *runtime.Job, r ledger.Reconcile) error {
			s, err := runtime.BatchSummaryOf(job)
			if err != nil {
				return runtime.NoRetry(err)
			}
			mu.Lock()
			calls[r.Day] = append(calls[r.Day], s)
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		workers = append(workers, w)
	}

	// 40 deposits over four accounts, two of them to a closed one, which
	// fail for good.
	accounts := []string{"ann", "bob", "cat", "dan"}
	deposits = nil
	want := map[string]int64{}
	for i := range 38 {
		a := accounts[i%len(accounts)]
		deposits = append(deposits, ledger.Deposit{Account: a, Cents: int64(i + 1)})
		want[a] += int64(i + 1)
	}
	deposits = append(deposits, ledger.Deposit{Account: "closed", Cents: 5}, ledger.Deposit{Account: "closed", Cents: 6})
	onDeposits, err := ledger.RequestReconcile(ledger.Reconcile{Day: "deposits"})
	if err != nil {
		t.Fatal(err)
	}
	// The batch, its 40 jobs and its callback go in one statement.
	traced := poolConfig.Copy()
	counter := &statements{}
	traced.ConnConfig.Tracer = counter
	tracedPool, err := pgxpool.NewWithConfig(ctx, traced)
	if err != nil {
		t.Fatal(err)
	}
	defer tracedPool.Close()
	if err := tracedPool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	before := counter.n.Load()
	depositBatch, depositIDs, err := ledger.EnqueueDepositBatch(ctx, tracedPool, deposits, runtime.BatchOptions{OnFinish: &onDeposits})
	if err != nil {
		t.Fatal(err)
	}
	if n := counter.n.Load() - before; n != 1 {
		t.Errorf("the typed batch of %d deposits and its callback took %d statements; want 1", len(deposits), n)
	}
	if len(depositIDs) != len(deposits) {
		t.Fatalf("%d ids for %d deposits", len(depositIDs), len(deposits))
	}
	// The statements are in their accounts' groups, after the deposits.
	var statements []ledger.Statement
	for _, a := range accounts {
		statements = append(statements, ledger.Statement{Account: a})
	}
	onStatements, err := ledger.RequestReconcile(ledger.Reconcile{Day: "statements"})
	if err != nil {
		t.Fatal(err)
	}
	statementBatch, statementIDs, err := ledger.EnqueueStatementBatch(ctx, pool, statements, runtime.BatchOptions{OnFinish: &onStatements})
	if err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	// A test that fails on the way stops its workers before it ends.
	defer func() { stop(); running.Wait() }()
	for _, w := range workers {
		running.Add(1)
		go func() {
			defer running.Done()
			if err := w.Run(runCtx); err != nil {
				t.Error(err)
			}
		}()
	}
	var callbacks []runtime.JobID
	for _, id := range []runtime.BatchID{depositBatch, statementBatch} {
		b, err := runtime.GetBatch(ctx, pool, id)
		if err != nil {
			t.Fatal(err)
		}
		callbacks = append(callbacks, b.OnFinish)
	}
	testWaitFinished(t, pool, callbacks...)
	stop()
	running.Wait()

	for _, id := range callbacks {
		info, err := runtime.GetJob(ctx, pool, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.Status != runtime.StatusSucceeded || info.Attempts != 1 {
			t.Errorf("callback %d: %s after %d attempts; want succeeded after 1", id, info.Status, info.Attempts)
		}
	}
	wantSummary := map[string]runtime.BatchSummary{
		"deposits":   {BatchID: depositBatch, Total: 40, Succeeded: 38, Failed: 2, Finished: true},
		"statements": {BatchID: statementBatch, Total: 4, Succeeded: 4, Finished: true},
	}
	for day, w := range wantSummary {
		if got := calls[day]; len(got) != 1 || got[0] != w {
			t.Errorf("Reconcile %q ran with %+v; want once with %+v", day, got, w)
		}
	}
	results, err := ledger.GetStatementResults(ctx, pool, statementIDs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if a := accounts[i]; r.Err != nil || r.Value != (ledger.Total{Account: a, Cents: want[a]}) {
			t.Errorf("statement of %s: %+v; want a total of %d", a, r, want[a])
		}
	}
}

// statements counts the statements a pool's connections send.
type statements struct{ n atomic.Int64 }

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
