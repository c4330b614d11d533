package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-chaos/internal/chaosdb"
	chaosschema "github.com/pgtask/pgtask/tools/sql/chaos/schema"
)

// The tests below seed a run's record with violations of checks 1, 5, 10
// and 11 (beside records that keep them) and require each check to report
// exactly those: a check that cannot fail proves nothing. Each test has a
// database of its own on one throwaway cluster they share, set up as the
// run's is (track_commit_timestamp on), with pgtask's schema and the run's
// record.

// checkCluster is the cluster the tests share, started by the first that
// needs it and stopped by TestMain (see CloseCheckCluster).
var checkCluster struct {
	once sync.Once
	c    *pgtasktest.Cluster
	err  error
}

// CloseCheckCluster stops the cluster the check tests share, if one of
// them started it.
func CloseCheckCluster() {
	if checkCluster.c != nil {
		checkCluster.c.Close() //nolint:errcheck // its directory goes
	}
}

// recordDB returns a new database, on the cluster the tests share, with
// pgtask's schema and the run's record.
func recordDB(t *testing.T) (*pgxpool.Pool, *chaosdb.Queries) {
	t.Helper()
	ctx := t.Context()
	checkCluster.once.Do(func() {
		checkCluster.c, checkCluster.err = pgtasktest.StartCluster(context.Background(), pgtasktest.ClusterOptions{Settings: clusterSettings})
	})
	if checkCluster.err != nil {
		t.Fatal(checkCluster.err)
	}
	url, err := pgtasktest.CreateDatabase(ctx, checkCluster.c.URL("postgres"), "")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := runtime.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, chaosschema.SQL); err != nil {
		t.Fatal(err)
	}
	return pool, chaosdb.New(pool)
}

// inTx runs f in a transaction of pool and commits it.
func inTx(t *testing.T, pool *pgxpool.Pool, f func(tx pgx.Tx)) {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	f(tx)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// commitFlow enqueues u as the producer does: the workflow, its record and
// the record of its jobs in one transaction. It returns the steps' ids and
// the workflow's.
func commitFlow(t *testing.T, pool *pgxpool.Pool, u unit) ([]int64, runtime.WorkflowID) {
	t.Helper()
	var ids []int64
	var wf runtime.WorkflowID
	inTx(t, pool, func(tx pgx.Tx) {
		var err error
		ids, wf, err = enqueueWorkflow(t.Context(), tx, u)
		if err != nil {
			t.Fatal(err)
		}
		recordUnit(t, tx, u, ids)
		err = chaosdb.New(tx).RecordWorkflow(t.Context(), chaosdb.RecordWorkflowParams{
			WorkflowID: int64(wf), Steps: int32(len(ids)), CancelExpected: u.flow.cancelExpected, OperatorCancel: u.flow.operatorCancel,
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	return ids, wf
}

// commitBatch enqueues u as the producer does: the batch with its
// callbacks, its record and the record of its jobs. It returns the jobs'
// ids and the callbacks'.
func commitBatch(t *testing.T, pool *pgxpool.Pool, u unit) (ids []int64, onFinish, onFailure int64) {
	t.Helper()
	var batch runtime.BatchID
	inTx(t, pool, func(tx pgx.Tx) {
		var err error
		ids, _, batch, err = enqueueBatched(t.Context(), tx, u)
		if err != nil {
			t.Fatal(err)
		}
		recordUnit(t, tx, u, ids)
		err = chaosdb.New(tx).RecordBatch(t.Context(), chaosdb.RecordBatchParams{
			BatchID: int64(batch), Jobs: int32(len(ids)), ExpectFailure: u.batch.expectFailure,
			FinishBehavior: u.batch.finish, FailureBehavior: u.batch.failure,
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	b, err := runtime.GetBatch(t.Context(), pool, batch)
	if err != nil {
		t.Fatal(err)
	}
	return ids, int64(b.OnFinish), int64(b.OnFailure)
}

func recordUnit(t *testing.T, tx pgx.Tx, u unit, ids []int64) {
	t.Helper()
	n := len(u.items)
	seqs, behaviors, limitKeys, limitMaxes := make([]int32, n), make([]string, n), make([]string, n), make([]int32, n)
	for i, it := range u.items {
		behaviors[i] = it.behavior
	}
	err := chaosdb.New(tx).RecordEnqueued(t.Context(), chaosdb.RecordEnqueuedParams{
		JobIds: ids, GroupKeys: groupsOf(u.items), Seqs: seqs, Behaviors: behaviors, How: u.how,
		LimitKeys: limitKeys, LimitMaxes: limitMaxes, Expects: u.expects,
	})
	if err != nil {
		t.Fatal(err)
	}
}

// flow is a workflow unit of plain steps: deps[i] are step i's parents.
func flow(behaviors []string, expects []string, deps [][]flowDep, cancelExpected, operatorCancel bool) unit {
	items := make([]item, len(behaviors))
	for i, b := range behaviors {
		items[i] = item{seq: i, behavior: b}
	}
	return unit{items: items, how: howWorkflow, expects: expects,
		flow: &flowPlan{deps: deps, cancelExpected: cancelExpected, operatorCancel: operatorCancel}}
}

func seedEnd(t *testing.T, q *chaosdb.Queries, id int64, status string) {
	t.Helper()
	if err := q.SeedJobEnd(t.Context(), chaosdb.SeedJobEndParams{ID: id, Status: status}); err != nil {
		t.Fatal(err)
	}
}

var seedAttempts atomic.Int64

// seedAttempt records that a handler ran an attempt of job id at at.
func seedAttempt(t *testing.T, q *chaosdb.Queries, id int64, at time.Time) {
	t.Helper()
	if err := q.SeedAttemptAt(t.Context(), chaosdb.SeedAttemptAtParams{ID: seedAttempts.Add(1), JobID: id, StartedAt: at}); err != nil {
		t.Fatal(err)
	}
}

// wantKinds fails t unless c has exactly the violations of want, by kind.
func wantKinds(t *testing.T, c Check, want map[string]int) {
	t.Helper()
	if !maps.Equal(c.ByKind, want) {
		t.Errorf("check %d reported %v, want %v; examples:", c.Number, c.ByKind, want)
		for _, e := range c.Examples {
			t.Errorf("  %s", e)
		}
	}
	t.Logf("check %d: %v, e.g. %q", c.Number, c.ByKind, c.Examples)
}

func checkNothingLost(t *testing.T, q *chaosdb.Queries) Check {
	t.Helper()
	c := newCheck(1, "nothing lost")
	rows, err := q.CheckNothingLost(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		c.add(r.Kind, r.Detail)
	}
	return c
}

// TestCheckWorkflowPolicies seeds steps that started though a parent had
// failed (policy After), before a parent's success was recorded (After),
// or before a failed parent had finished (Anyway), and a step that ended cancelled in a workflow nobody cancelled; and, to
// be left alone, a step that ended cancelled in a workflow an operator did
// cancel.
func TestCheckWorkflowPolicies(t *testing.T) {
	t.Parallel()
	pool, q := recordDB(t)
	ctx := t.Context()

	// a fails for good; b (After a) must be cancelled and never start; c
	// (Anyway after a) runs after a failed; d (Anyway after a) succeeds.
	ids, _ := commitFlow(t, pool, flow(
		[]string{behaveNoRetry, behaveOK, behaveOK, behaveOK},
		[]string{endFailed, endCancelled, endSucceeded, endSucceeded},
		[][]flowDep{nil, {{0, runtime.CancelDependent}}, {{0, runtime.RunAnyway}}, {{0, runtime.RunAnyway}}},
		false, false))
	a, b, c, d := ids[0], ids[1], ids[2], ids[3]
	seedEnd(t, q, a, "failed") // its children hear of it: b is cancelled, c and d released
	seedAttempt(t, q, b, time.Now())
	seedAttempt(t, q, c, time.Now().Add(-time.Hour)) // before a finished
	seedEnd(t, q, c, "succeeded")
	seedAttempt(t, q, d, time.Now())
	seedEnd(t, q, d, "cancelled") // though nothing cancelled its workflow

	// e succeeds; f (After e) starts before e's success was recorded.
	ids3, _ := commitFlow(t, pool, flow([]string{behaveOK, behaveOK}, []string{endSucceeded, endSucceeded},
		[][]flowDep{nil, {{0, runtime.CancelDependent}}}, false, false))
	e, f := ids3[0], ids3[1]
	seedEnd(t, q, e, "succeeded") // releases f
	seedAttempt(t, q, f, time.Now().Add(-time.Hour))
	seedEnd(t, q, f, "succeeded")

	// An operator cancelled this one: a step that ended cancelled is one
	// of the ends it allows.
	ids2, wf2 := commitFlow(t, pool, flow([]string{behaveOK, behaveOK}, []string{endSucceeded, endSucceeded},
		[][]flowDep{nil, {{0, runtime.CancelDependent}}}, false, true))
	seedEnd(t, q, ids2[0], "succeeded")
	if err := (&canceller{pool: pool}).cancel(ctx, wf2); err != nil {
		t.Fatal(err)
	}

	wc, _, err := checkWorkflows(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	wantKinds(t, wc, map[string]int{
		"started though a parent had not succeeded": 1, // b
		"started before a parent finished":          1, // c
		"started before a parent succeeded":         1, // f
	})
	wantKinds(t, checkNothingLost(t, q), map[string]int{"wrong end": 1}) // d
}

// TestCheckWorkflowCancels seeds a step claimed after its workflow's cancel
// committed, by an operator and by a failure under OrCancelWorkflow; a
// workflow meant to be cancelled that is not; and one cancelled that was
// meant to be by neither.
func TestCheckWorkflowCancels(t *testing.T) {
	t.Parallel()
	pool, q := recordDB(t)
	ctx := t.Context()
	two := [][]flowDep{nil, {{0, runtime.CancelDependent}}}
	ok2 := []string{behaveOK, behaveOK}
	want2 := []string{endSucceeded, endSucceeded}

	// An operator cancels it; then its first step is claimed.
	ids1, wf1 := commitFlow(t, pool, flow(ok2, want2, two, false, true))
	if err := (&canceller{pool: pool}).cancel(ctx, wf1); err != nil {
		t.Fatal(err)
	}
	if err := q.SeedJobClaimed(ctx, ids1[0]); err != nil {
		t.Fatal(err)
	}

	// Its first step fails, which cancels it (OrCancelWorkflow); then its
	// second step is claimed.
	ids2, _ := commitFlow(t, pool, flow([]string{behaveNoRetry, behaveOK}, []string{endFailed, endCancelled},
		[][]flowDep{nil, {{0, runtime.CancelWorkflow}}}, true, false))
	seedEnd(t, q, ids2[0], "failed")
	if err := q.SeedJobClaimed(ctx, ids2[1]); err != nil {
		t.Fatal(err)
	}

	// Meant to be cancelled by its failure, but its steps succeed.
	ids3, _ := commitFlow(t, pool, flow([]string{behaveNoRetry, behaveOK}, []string{endFailed, endCancelled},
		[][]flowDep{nil, {{0, runtime.CancelWorkflow}}}, true, false))
	seedEnd(t, q, ids3[0], "succeeded")
	seedEnd(t, q, ids3[1], "succeeded")

	// Cancelled, though meant to be by nobody.
	_, wf4 := commitFlow(t, pool, flow(ok2, want2, two, false, false))
	if _, err := runtime.CancelWorkflowByID(ctx, pool, wf4); err != nil {
		t.Fatal(err)
	}

	// Cancelled by an operator, with nothing claimed after: no violation.
	ids5, wf5 := commitFlow(t, pool, flow(ok2, want2, two, false, true))
	if err := q.SeedJobClaimed(ctx, ids5[0]); err != nil {
		t.Fatal(err)
	}
	if err := (&canceller{pool: pool}).cancel(ctx, wf5); err != nil {
		t.Fatal(err)
	}

	// An operator was to cancel it, but no cancel committed: a problem of
	// the run, not a violation.
	_, wf6 := commitFlow(t, pool, flow(ok2, want2, two, false, true))
	missed, err := q.MissedOperatorCancels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(missed, []int64{int64(wf6)}) {
		t.Errorf("workflows with an operator's cancel missing: %v, want [%d]", missed, wf6)
	}

	wc, wr, err := checkWorkflows(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	wantKinds(t, wc, map[string]int{
		"started after its workflow's cancel committed": 2, // ids1[0], ids2[1]
		"not cancelled":          1, // 3
		"cancelled unexpectedly": 1, // 4
	})
	if wr.CancelledByFailure != 1 || wr.OperatorCancels != 2 {
		t.Errorf("workflows cancelled by a failure %d, by an operator %d; want 1 and 2", wr.CancelledByFailure, wr.OperatorCancels)
	}
	// Workflow 3's steps succeeded where the first should have failed and
	// the second been cancelled; workflow 4's two steps ended cancelled
	// though nothing allowed it.
	wantKinds(t, checkNothingLost(t, q), map[string]int{"wrong end": 4, "unfinished": 2}) // and workflow 6's steps wait
}

// TestCheckBatchCallbacks seeds an OnFinish callback that ran twice and
// started after its batch's last job finished but before the batch ended,
// an OnFailure callback that never ran though a job failed, one that ran
// though none did, one that started before its batch's failure, and a
// summary with wrong counts; and, to be left alone, a batch whose
// callbacks did what they must, after the batch ended. The batches end as
// a worker's maintenance ends them.
func TestCheckBatchCallbacks(t *testing.T) {
	t.Parallel()
	pool, q := recordDB(t)
	ctx := t.Context()
	batch := func(behaviors ...string) unit {
		items := make([]item, len(behaviors))
		for i, b := range behaviors {
			items[i] = item{seq: i, behavior: b}
		}
		u := plainUnit(items, howEnqueueBatch)
		u.batch = &batchPlan{finish: behaveOK, failure: behaveOK, expectFailure: slices.Contains(u.expects, endFailed)}
		return u
	}
	run := func(job, batchID int64, attempt int32, finished bool, total, succeeded, failed int32) {
		t.Helper()
		err := q.RecordCallbackRun(ctx, chaosdb.RecordCallbackRunParams{JobID: job, Attempt: attempt, BatchID: batchID,
			Finished: finished, Total: total, Succeeded: succeeded, Failed: failed})
		if err != nil {
			t.Fatal(err)
		}
		if attempt > 1 {
			return // one effect, from the first
		}
		if err := q.InsertEffect(ctx, chaosdb.InsertEffectParams{JobID: job, Attempt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	batchOf := func(job int64) int64 {
		j, err := runtime.GetJob(ctx, pool, runtime.JobID(job))
		if err != nil {
			t.Fatal(err)
		}
		return int64(j.BatchID)
	}

	// 1. A job fails. OnFinish starts after the last job finished but
	// before the batch ended, and commits two runs; OnFailure never runs.
	ids1, fin1, _ := commitBatch(t, pool, batch(behaveOK, behaveNoRetry))
	seedEnd(t, q, ids1[0], "succeeded")
	seedEnd(t, q, ids1[1], "failed")
	seedAttempt(t, q, fin1, time.Now())

	// 2. No job fails, yet OnFailure runs (after the batch ended, which
	// cancelled it); OnFinish reads wrong counts.
	ids2, fin2, fail2 := commitBatch(t, pool, batch(behaveOK, behaveOK))
	seedEnd(t, q, ids2[0], "succeeded")
	seedEnd(t, q, ids2[1], "succeeded")

	// 3. As it must be: a job fails, each callback starts after the batch
	// ended and runs once with its counts.
	ids3, fin3, fail3 := commitBatch(t, pool, batch(behaveOK, behaveNoRetry))
	seedEnd(t, q, ids3[0], "succeeded")
	seedEnd(t, q, ids3[1], "failed")

	// 4. OnFailure starts before its batch's job failed; OnFinish as it
	// must be.
	ids4, fin4, fail4 := commitBatch(t, pool, batch(behaveOK, behaveNoRetry))
	seedEnd(t, q, ids4[0], "succeeded")
	seedAttempt(t, q, fail4, time.Now())
	seedEnd(t, q, ids4[1], "failed")

	// Maintenance ends the four batches: it stamps their failures and ends,
	// releases their callbacks and cancels batch 2's OnFailure.
	if n, err := q.SeedFinishBatches(ctx); err != nil || n != 4 {
		t.Fatalf("batches ended: %d, %v; want 4", n, err)
	}

	run(fin1, batchOf(ids1[0]), 1, true, 2, 1, 1)
	run(fin1, batchOf(ids1[0]), 2, true, 2, 1, 1)
	seedEnd(t, q, fin1, "succeeded")

	run(fin2, batchOf(ids2[0]), 1, true, 2, 1, 0)
	seedEnd(t, q, fin2, "succeeded")
	seedAttempt(t, q, fail2, time.Now())
	run(fail2, batchOf(ids2[0]), 1, false, 2, 2, 0)
	seedEnd(t, q, fail2, "succeeded")

	seedAttempt(t, q, fail3, time.Now())
	run(fail3, batchOf(ids3[0]), 1, false, 2, 1, 1)
	seedEnd(t, q, fail3, "succeeded")
	seedAttempt(t, q, fin3, time.Now())
	run(fin3, batchOf(ids3[0]), 1, true, 2, 1, 1)
	seedEnd(t, q, fin3, "succeeded")

	run(fail4, batchOf(ids4[0]), 1, false, 2, 1, 1)
	seedEnd(t, q, fail4, "succeeded")
	seedAttempt(t, q, fin4, time.Now())
	run(fin4, batchOf(ids4[0]), 1, true, 2, 1, 1)
	seedEnd(t, q, fin4, "succeeded")

	bc, br, err := checkBatches(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	wantKinds(t, bc, map[string]int{
		"not once":                       2, // fin1 (two runs), batch 1's OnFailure (none)
		"started before the batch ended": 1, // fin1
		"ran with no failure":            1, // fail2
		"started before a failure":       1, // fail4
		"wrong summary":                  2, // fin2, and fail2's summary says no failure
	})
	if br.Batches != 4 || br.WithFailure != 3 {
		t.Errorf("batches %d, with a failure %d; want 4 and 3", br.Batches, br.WithFailure)
	}
	// Batch 1's OnFailure is still waiting, batch 2's succeeded where it
	// should have been cancelled.
	wantKinds(t, checkNothingLost(t, q), map[string]int{"unfinished": 1, "wrong end": 1})
}

// TestCheckCancelledErrorHistory seeds a workflow step cancelled after an
// attempt that left no entry in its error history (an operator's cancel of
// a running attempt records one); and, to be left alone, its child,
// cancelled before it ever ran, with none.
func TestCheckCancelledErrorHistory(t *testing.T) {
	t.Parallel()
	pool, q := recordDB(t)
	ctx := t.Context()
	ids, _ := commitFlow(t, pool, flow([]string{behaveOK, behaveOK}, []string{endSucceeded, endSucceeded},
		[][]flowDep{nil, {{0, runtime.CancelDependent}}}, false, false))
	if err := q.SeedJobClaimed(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	seedAttempt(t, q, ids[0], time.Now())
	seedEnd(t, q, ids[0], "cancelled") // its child is cancelled with it

	wantKinds(t, checkAttempts(t, q), map[string]int{"error history": 1}) // ids[0]
}

func checkAttempts(t *testing.T, q *chaosdb.Queries) Check {
	t.Helper()
	c := newCheck(5, "attempts")
	rows, err := q.CheckAttempts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		c.add(r.Kind, r.Detail)
	}
	return c
}

// TestCheckCutShortAtClaim seeds steps claimed after their workflow's
// operator cancel committed, each with no handler's start row unless said:
// one whose attempt was cut short at its claim (the cancel found pending,
// with the error entry the runtime writes for it), which checks 5 and 10
// leave alone; one with another error entry and one with none, which
// check 5 reports as counted but never started and check 10 as claimed
// after the cancel; and one whose error entry says it was cut short but
// whose handler recorded a start, which check 10 holds as a start.
func TestCheckCutShortAtClaim(t *testing.T) {
	t.Parallel()
	pool, q := recordDB(t)
	ctx := t.Context()
	// The entry pgtask writes for an attempt its claim cut short (see
	// Worker.call in runtime/pipeline.go).
	cutShort := fmt.Errorf("%w before the attempt started", runtime.ErrJobCancelled).Error()
	other := fmt.Errorf("%w during the attempt: handler stopped", runtime.ErrJobCancelled).Error()
	claimed := func(entry string, started bool) int64 {
		t.Helper()
		ids, wf := commitFlow(t, pool, flow([]string{behaveOK, behaveOK}, []string{endSucceeded, endSucceeded},
			[][]flowDep{nil, {{0, runtime.CancelDependent}}}, false, true))
		if err := (&canceller{pool: pool}).cancel(ctx, wf); err != nil {
			t.Fatal(err)
		}
		if err := q.SeedJobClaimed(ctx, ids[0]); err != nil {
			t.Fatal(err)
		}
		if entry != "" {
			if err := q.SeedJobError(ctx, chaosdb.SeedJobErrorParams{ID: ids[0], Error: entry}); err != nil {
				t.Fatal(err)
			}
		}
		if started {
			seedAttempt(t, q, ids[0], time.Now())
		}
		return ids[0]
	}
	claimed(cutShort, false)
	claimed(other, false)
	claimed("", false)
	claimed(cutShort, true)

	wc, _, err := checkWorkflows(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	// The other entry's, no entry's, and the one whose handler started.
	wantKinds(t, wc, map[string]int{"started after its workflow's cancel committed": 3})
	wantKinds(t, checkAttempts(t, q), map[string]int{
		"not started":   2, // the other entry's and no entry's
		"error history": 1, // no entry's: a cancelled job keeps one for each attempt
	})
}
