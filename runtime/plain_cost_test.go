package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// What a plain job (in no workflow, no limit, no rate, no fair queue) costs
// is counted here, so that a feature that adds to it for jobs that do not
// use the feature is seen.

// Every statement that updates or deletes jobs prepares the WHEN clause of
// each of the table's row triggers again. A SQL function called there is
// inlined each time, its body parsed anew, and an IN list is folded into an
// array, on every update of every job, whether the trigger fires or not.
func TestJobTriggersNeedNoPlanningInTheirWhen(t *testing.T) {
	t.Parallel()
	b := setup(t)
	names, err := b.q.JobTriggersNeedingPlanning(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(names) > 0 {
		t.Fatalf("triggers on pgtask.jobs whose WHEN calls a function or holds an IN list: %v", names)
	}
}

// The workflow triggers spell job_pending's set of statuses out (see
// TestJobTriggersNeedNoPlanningInTheirWhen): a status added to the set
// must be added to them too, or a step in it would never tell its children.
func TestWorkflowTriggersMatchJobPending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rows, err := b.q.WorkflowTriggersPendingArrays(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("found %d jobs_workflow_* triggers, want 4", len(rows))
	}
	for _, r := range rows {
		if !strings.Contains(r.Definition, r.PendingArray) {
			t.Errorf("trigger %s does not test job_pending's statuses %s: %s", r.TriggerName, r.PendingArray, r.Definition)
		}
	}
}

// A plain job's claim and success, with the claim that follows them in the
// same transaction as a held runner does, call these functions once per job
// each, and none other per job.
func TestPlainJobCallsOnlyItsOwnFunctions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const jobs = 3
	for range jobs {
		enqueue(t, b.pool, "plain.cost", map[string]any{})
	}
	_, q, g := countingTx(t, b)
	for i := range jobs {
		claimed, err := g.ClaimJobs(ctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: 1})
		if err != nil || len(claimed) != 1 {
			t.Fatalf("claim %d: %v, %v", i, claimed, err)
		}
		r, err := g.SettleJobs(ctx, gen.SettleJobsParams{Queue: runtime.DefaultQueue,
			Ids: []int64{claimed[0].ID}, Attempts: []int32{claimed[0].Attempts},
			Results: []json.RawMessage{nil}, Errors: []json.RawMessage{nil}, RetryInUs: []int64{0},
			SnoozeCaps: []int32{0}, Tokens: []int64{0}, Claiming: i < jobs-1})
		if err != nil || r.Recorded != 1 {
			t.Fatalf("settle %d: %+v, %v", i, r, err)
		}
	}
	calls, err := q.FunctionCallsHere(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, c := range calls {
		if c.Calls >= jobs { // a constant folded once per plan is not the jobs' cost
			got[c.FunctionName] = c.Calls
		}
	}
	// cancel_claimed: every claim looks for a cancel request filed while
	// an earlier attempt's end was being recorded (one probe of an index
	// of cancel_requests), so that no cancel is lost.
	want := map[string]int64{"claim_jobs": jobs, "require_read_committed": jobs, "pick_heads": jobs,
		"start_held": jobs, "settle_jobs": jobs, "cancel_claimed": jobs}
	if !maps.Equal(got, want) {
		t.Fatalf("functions called for %d plain jobs: %v, want %v (extra: %v)", jobs, got, want, extra(got, want))
	}
	planEveryCall(t, calls, jobs)
}

// A job's claim and success, in either mode, grouped or not, plan no
// statement per call (see planEveryCall).
func TestJobPathsPlanNoStatementPerCall(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		for _, group := range []string{"", "g"} {
			t.Run(fmt.Sprintf("%s/group=%q", mode, group), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				ctx := context.Background()
				const jobs = 3
				for range jobs {
					var opts []runtime.EnqueueOption
					if group != "" {
						opts = append(opts, runtime.WithGroup(group))
					}
					enqueue(t, b.pool, "plain.cost", map[string]any{}, opts...)
				}
				_, q, g := countingTx(t, b)
				for i := range jobs {
					var id int64
					var attempt int32
					if mode == runtime.ModeLease {
						claimed, err := g.ClaimLeasedJobs(ctx, gen.ClaimLeasedJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: 1,
							LeaseMs: 30_000, Token: int64(i + 1), RunMax: 1})
						if err != nil || len(claimed) != 1 {
							t.Fatalf("claim %d: %v, %v", i, claimed, err)
						}
						id, attempt = claimed[0].ID, claimed[0].Attempts
					} else {
						claimed, err := g.ClaimJobs(ctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: 1, WorkerID: 1})
						if err != nil || len(claimed) != 1 {
							t.Fatalf("claim %d: %v, %v", i, claimed, err)
						}
						id, attempt = claimed[0].ID, claimed[0].Attempts
					}
					r, err := g.SettleJobs(ctx, gen.SettleJobsParams{Queue: runtime.DefaultQueue,
						Ids: []int64{id}, Attempts: []int32{attempt},
						Results: []json.RawMessage{nil}, Errors: []json.RawMessage{nil}, RetryInUs: []int64{-1},
						SnoozeCaps: []int32{0}, Tokens: []int64{0}})
					if err != nil || r.Recorded != 1 {
						t.Fatalf("settle %d: %+v, %v", i, r, err)
					}
				}
				calls, err := q.FunctionCallsHere(ctx)
				if err != nil {
					t.Fatal(err)
				}
				planEveryCall(t, calls, jobs)
			})
		}
	}
}

// planEveryCall fails t for each function called once per job or more
// that is written in SQL and not immutable: one that shows as called was
// not inlined, and PostgreSQL plans a SQL function's statements again at
// every call (a PL/pgSQL function keeps its plans for the session), which
// for a statement of a few joins costs more than running it. (An immutable
// one, a constant such as a lock class, is folded into the plan that
// calls it.)
func planEveryCall(t *testing.T, calls []testdb.FunctionCallsHereRow, jobs int64) {
	t.Helper()
	for _, c := range calls {
		if c.Calls >= jobs && c.Language == "sql" && c.Volatility != "i" {
			t.Errorf("pgtask.%s is a SQL function called %d times for %d jobs: its statements are planned at every call",
				c.FunctionName, c.Calls, jobs)
		}
	}
}

// extra lists the names got has that want has not, or with other counts.
func extra(got, want map[string]int64) []string {
	var names []string
	for name, n := range got {
		if want[name] != n {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// An enqueue, alone or many at once, grouped or not, plans no statement per
// call (see planEveryCall).
func TestEnqueuePlansNoStatementPerCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tx, q, _ := countingTx(t, b)
	const calls = 3
	for i := range calls {
		enqueue(t, tx, "plain.cost", map[string]any{})
		enqueue(t, tx, "plain.cost", map[string]any{}, runtime.WithGroup(fmt.Sprint("g", i)))
		reqs := []runtime.EnqueueRequest{{Kind: "plain.cost", Payload: json.RawMessage(`{}`)}, {Kind: "plain.cost", Payload: json.RawMessage(`{}`)}}
		reqs[1].Apply(runtime.WithGroup("many"))
		if _, err := runtime.EnqueueMany(ctx, tx, reqs); err != nil {
			t.Fatal(err)
		}
	}
	got, err := q.FunctionCallsHere(ctx)
	if err != nil {
		t.Fatal(err)
	}
	planEveryCall(t, got, calls)
}

// countingTx begins a transaction on b's pool, rolled back when the test
// ends, that counts its calls of pgtask's functions (FunctionCallsHere).
func countingTx(t *testing.T, b *bundle) (pgx.Tx, *testdb.Queries, *gen.Queries) {
	t.Helper()
	tx := beginTx(t, b)
	q := testdb.New(tx)
	if err := q.TrackFunctionCalls(context.Background()); err != nil {
		t.Fatal(err)
	}
	return tx, q, gen.New(tx)
}
