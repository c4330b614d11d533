package chaos

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-chaos/internal/chaosdb"
)

// Names of the faults in Result.Faults.
const (
	FaultSigkill   = "SIGKILL of a worker process"
	FaultPoison    = "poison job SIGKILLed its own process"
	FaultTerminate = "worker session terminated (pg_terminate_backend)"
	FaultInJob     = "  of which in a transaction"
	FaultMid       = "  of which while its handler ran"
	FaultRestart   = "database restart (fast shutdown)"
	FaultCrash     = "database crash (SIGKILL, recovery)"
	FaultError     = "handler returned an error"
	FaultPanic     = "handler panicked"
	FaultTimeout   = "handler outlived its timeout"
	FaultNoRetry   = "handler failed for good (NoRetry)"
	FaultPause     = "lease-mode worker process paused past its lease (SIGSTOP)"
)

// kindTakeoverOverlap is the kind of check 2's rows that are an observation:
// an attempt taken over after its lease expired overlaps the next one.
const kindTakeoverOverlap = "overlap after lease takeover"

// kindTakeoverOverLimit is the kind of check 8's rows that are an
// observation: a key ran more jobs than its limit only counting attempts
// taken over after their lease expired until their handler ended.
const kindTakeoverOverLimit = "over limit after lease takeover"

// Result is what a run found.
type Result struct {
	Config Config
	// Duration is the run from the cluster's start to the workers' stop;
	// CheckDuration is the reading and checking of the record after it.
	Duration      time.Duration
	CheckDuration time.Duration
	// Finished is false when the run hit its timeout or was interrupted
	// before every job had finished.
	Finished bool
	Jobs     JobTotals
	Faults   []Count
	Checks   []Check
	// Observations are behaviour worth knowing that no check forbids.
	Observations []Observation
	Workers      []WorkerReport
	// Lease is what the pauses of lease-mode processes (and the database's
	// restart and crash) did to leases.
	Lease LeaseReport
	// Long is the long jobs and the database's restart and crash.
	Long LongReport
	// Horizon is the transaction held open beside the run.
	Horizon HorizonReport
	// Limits is each limit key of the limited jobs, by key.
	Limits []LimitReport
	// Rates is each rate key of the rate-limited jobs, by key.
	Rates []RateReport
	// Workflows is what the workflows' failures and cancels did.
	Workflows WorkflowReport
	// Batches is the batches and their callbacks.
	Batches BatchReport
	// Problems are failures of the run itself: a worker process that ended
	// on its own, a restart that failed, records that could not be written.
	Problems []string
}

// LeaseReport counts what became of lease-mode attempts whose lease ran out.
type LeaseReport struct {
	Lease  time.Duration // of the lease-mode processes
	Pauses int64         // lease-mode processes paused, each for 2 x Lease
	// TakenOver is how many attempts other workers took over after their
	// lease expired (error entries starting "lease expired"); TakenWhilePaused
	// how many of them while a process was paused.
	TakenOver        int64
	TakenWhilePaused int64
	// StaleOutcomes is the sum of pgtask.jobs.stale_outcomes: outcomes the
	// runtime refused because their attempt was no longer the job's
	// current one; StaleOnTaken those of them on jobs that were taken over.
	StaleOutcomes int64
	StaleOnTaken  int64
	// Overlaps is how many of check 2's overlaps had a taken-over attempt
	// claimed first: an observation, not a violation.
	Overlaps int
}

// LongReport is the long jobs and the database faults they ran across.
type LongReport struct {
	Jobs int // long jobs in the plan
	// Waited is how long the restart waited for a long attempt in a
	// lease-mode process; Found whether there was one by then, and Landed
	// what became of it.
	Waited time.Duration
	Found  bool
	Landed string
	// Away is how long each database fault (restart, crash) took, from
	// its start until the server answered again.
	Away map[string]time.Duration
	// Attempts counts, per mode, the attempts that worked long (Spanned)
	// and those of them that recorded their job's success (Succeeded).
	Attempts []LongSpan
	// Across lists, per database fault and mode, the long attempts that
	// started before it and ended after it.
	Across map[string][]LongSpan
}

// LongSpan counts long attempts of one mode that spanned a database fault.
type LongSpan struct {
	Mode string
	// Spanned is how many; Succeeded how many of them the job's success was
	// recorded for (that attempt was its last, and the job succeeded).
	Spanned, Succeeded int64
}

// HorizonReport is the transaction Config.PinHorizon kept open.
type HorizonReport struct {
	Enabled bool
	// Held is how long a pinning transaction was open, over the whole run;
	// Longest the longest one.
	Held, Longest time.Duration
	// Opens counts the transactions opened: the first, and one after each
	// time the database ended the previous one.
	Opens int64
	// MaxLag is the most transaction ids handed out behind one of them.
	MaxLag int64
}

// LimitReport is one limit key of the chaos queue and what check 8 saw of
// it.
type LimitReport struct {
	Key   string // "" for the queue's own limit
	Limit int
	// Jobs is how many limited jobs of the key were committed; Attempts how
	// many of their attempts a handler started.
	Jobs, Attempts int64
	// Peak is the most attempts of the key that ran at once by check 8's
	// reckoning; PeakHandlers counting attempts taken over after their
	// lease expired until their handler ended.
	Peak, PeakHandlers int64
}

// RateReport is one rate key of the chaos queue and what check 9 saw of
// it.
type RateReport struct {
	Key   string
	Rate  int // jobs a second
	Burst int
	// Jobs is how many of its jobs started; MostInASecond the most of
	// their (last attempts') starts in any span of a second.
	Jobs          int
	MostInASecond int
}

// WorkflowReport counts the workflows and what their failures and cancels
// did (check 10).
type WorkflowReport struct {
	Workflows, Steps int64
	// Dependencies, by policy: After (cancel the child), Anyway,
	// OrCancelWorkflow.
	Edges, EdgesCancel, EdgesAnyway, EdgesWorkflow int64
	// Steps that failed for good, and that ended cancelled.
	StepsFailed, StepsCancelled int64
	// AnywayRan is how many steps ran after a parent of policy Anyway had
	// failed or been cancelled.
	AnywayRan int64
	// CancelledByFailure is how many workflows a failure under
	// OrCancelWorkflow cancelled; OperatorCancels how many an operator's
	// cancel committed for, OperatorMarked how many of them it marked (the
	// others were cancelled already), and OperatorCutShort how many of those
	// had steps that ended cancelled.
	CancelledByFailure, OperatorCancels, OperatorMarked, OperatorCutShort int64
	// OperatorCancelFailures is how many of the operator's tries to cancel
	// failed (the database was away, say) and were tried again.
	OperatorCancelFailures int64
}

// BatchReport counts the batches and their callbacks' runs (check 11).
type BatchReport struct {
	Batches, Jobs int64
	// WithFailure is how many had a job that failed for good.
	WithFailure int64
	// FinishRuns and FailureRuns are the committed runs of OnFinish and
	// OnFailure callbacks; CallbackAttempts the attempts of both that a
	// handler started.
	FinishRuns, FailureRuns, CallbackAttempts int64
}

// Count is a named number.
type Count struct {
	Name string
	N    int64
}

// JobTotals counts the jobs.
type JobTotals struct {
	HandedOut    int64            // ids handed out, jobs' and batches' callbacks', committed or not
	Committed    int64            // of them committed
	ByHow        map[string]int64 // committed, by how they were enqueued (see howEnqueueMany)
	NotCommitted map[string]int64 // by rollback, savepoint, failed
	Callbacks    int64            // of them batches' callbacks
	Succeeded    int64
	Failed       int64
	FailedAs     map[string]int64 // failed jobs by what their handler did
	Cancelled    int64            // workflow steps and callbacks cancelled
	Unfinished   int64
	Attempts     int64
}

// Check is one invariant and its violations.
type Check struct {
	Number     int
	Name       string
	Violations int
	ByKind     map[string]int
	Examples   []string
	// Note explains something about how the check was made.
	Note string
}

// Observation is something seen during the run that is not a violation.
type Observation struct {
	Name     string
	N        int
	Examples []string
}

// WorkerReport is one worker process.
type WorkerReport struct {
	Instance, Slot, PID, Batch, Concurrency int
	Lived                                   time.Duration
	RSSStart, RSSEnd, RSSPeak               int64 // KiB
	Ended                                   string
	Judged                                  bool // lived long enough for its memory to be judged
	Grew                                    bool
}

// Fault returns the count of a fault by name.
func (r *Result) Fault(name string) int64 {
	for _, c := range r.Faults {
		if c.Name == name {
			return c.N
		}
	}
	return 0
}

// Violations is the number of violations over all checks.
func (r *Result) Violations() int {
	n := 0
	for _, c := range r.Checks {
		n += c.Violations
	}
	return n
}

// OK reports whether the run finished with no violation and no problem.
func (r *Result) OK() bool {
	return r.Finished && r.Violations() == 0 && len(r.Problems) == 0
}

const maxExamples = 5

func newCheck(n int, name string) Check {
	return Check{Number: n, Name: name, ByKind: map[string]int{}}
}

func (c *Check) add(kind, detail string) {
	c.Violations++
	c.ByKind[kind]++
	if len(c.Examples) < maxExamples {
		c.Examples = append(c.Examples, detail)
	}
}

// violationRow is the shape of every check query's rows.
type violationRow struct{ kind, detail string }

func rowsOf[T any](rows []T, get func(T) (string, string)) []violationRow {
	out := make([]violationRow, len(rows))
	for i, r := range rows {
		out[i].kind, out[i].detail = get(r)
	}
	return out
}

// collect reads the record after the run and fills res.
func (o *orchestrator) collect(ctx context.Context, res *Result) error {
	q := o.q
	// The database may have just been crashed: wait until it answers.
	for {
		if _, err := q.JobProgress(ctx); err == nil {
			break
		} else if ctx.Err() != nil {
			return err
		}
		sleep(ctx, 100*time.Millisecond)
	}

	type query struct {
		n    int
		name string
		note string
		run  func() ([]violationRow, error)
	}
	queries := []query{
		{1, "nothing lost; no rolled-back job exists or ran", "", func() ([]violationRow, error) {
			rows, err := q.CheckNothingLost(ctx)
			return rowsOf(rows, func(r chaosdb.CheckNothingLostRow) (string, string) { return r.Kind, r.Detail }), err
		}},
		{2, "no two attempts of a group (or of a job) overlap", "an attempt cut off by a SIGKILL has no end; it counts as running until its process was signalled", func() ([]violationRow, error) {
			rows, err := q.CheckOverlaps(ctx)
			return rowsOf(rows, func(r chaosdb.CheckOverlapsRow) (string, string) { return r.Kind, r.Detail }), err
		}},
		{3, "each group starts its jobs in enqueue order", "", func() ([]violationRow, error) {
			rows, err := q.CheckGroupOrder(ctx)
			return rowsOf(rows, func(r chaosdb.CheckGroupOrderRow) (string, string) { return r.Kind, r.Detail }), err
		}},
		{4, "effects commit at most once (once for succeeded jobs)", "", func() ([]violationRow, error) {
			rows, err := q.CheckEffects(ctx)
			return rowsOf(rows, func(r chaosdb.CheckEffectsRow) (string, string) { return r.Kind, r.Detail }), err
		}},
		{5, "attempts counted = attempts made; poison fails at max", "", func() ([]violationRow, error) {
			rows, err := q.CheckAttempts(ctx)
			return rowsOf(rows, func(r chaosdb.CheckAttemptsRow) (string, string) { return r.Kind, r.Detail }), err
		}},
	}
	takeovers := Observation{Name: "overlaps of an attempt taken over after its lease expired with the next one (lease mode: a hung worker's attempt may still run; only one records anything, which check 4 holds to)"}
	for _, cq := range queries {
		c := newCheck(cq.n, cq.name)
		c.Note = cq.note
		rows, err := cq.run()
		if err != nil {
			return fmt.Errorf("check %d: %w", cq.n, err)
		}
		for _, r := range rows {
			if cq.n == 2 && r.kind == kindTakeoverOverlap {
				takeovers.N++
				if len(takeovers.Examples) < 3 {
					takeovers.Examples = append(takeovers.Examples, r.detail)
				}
				continue
			}
			c.add(r.kind, r.detail)
		}
		if cq.n == 1 {
			for done := false; !done; {
				select {
				case a := <-o.prod.anomalies:
					c.add("partial commit", a)
				default:
					done = true
				}
			}
		}
		res.Checks = append(res.Checks, c)
	}

	// 6. Memory, and 7. processes that died by themselves.
	mem := newCheck(6, "worker memory stays flat (end <= 2 x start + 20 MiB)")
	mem.Note = fmt.Sprintf("judged for processes that lived at least %s", o.cfg.RSSMinLife)
	exits := newCheck(7, "workers end only when stopped or killed; no data race")
	o.fleet.mu.Lock()
	procs := slices.Clone(o.fleet.procs)
	o.fleet.mu.Unlock()
	for _, p := range procs {
		p.mu.Lock()
		w := WorkerReport{
			Instance: p.instance, Slot: p.slot, PID: p.pid, Batch: p.batch, Concurrency: p.concurrency,
			RSSStart: p.rssStart, RSSEnd: p.rssEnd, RSSPeak: p.rssPeak, Ended: p.how(),
		}
		if !p.sampledAt.IsZero() {
			w.Lived = p.sampledAt.Sub(p.started)
		}
		p.mu.Unlock()
		w.Judged = w.RSSStart > 0 && w.Lived >= o.cfg.RSSMinLife
		if w.Judged && w.RSSEnd > 2*w.RSSStart+20*1024 {
			w.Grew = true
			mem.add("growth", fmt.Sprintf("worker process %d (slot %d) grew from %s to %s in %s",
				w.Instance, w.Slot, formatKiB(w.RSSStart), formatKiB(w.RSSEnd), w.Lived.Round(time.Second)))
		}
		switch w.Ended {
		case "sigkill", "stopped", "poison":
		default:
			exits.add(w.Ended, fmt.Sprintf("worker process %d (slot %d, pid %d): %s; its log ends:\n%s",
				w.Instance, w.Slot, w.PID, w.Ended, indent(logTail(p.logPath, 5), "      ")))
		}
		if b, err := os.ReadFile(p.logPath); err == nil && bytes.Contains(b, []byte("WARNING: DATA RACE")) {
			exits.add("data race", fmt.Sprintf("worker process %d (slot %d) reported a data race: see %s", w.Instance, w.Slot, p.logPath))
		}
		res.Workers = append(res.Workers, w)
	}
	res.Checks = append(res.Checks, mem, exits)

	// 8. Concurrency limits.
	limits, overLimit, err := o.checkLimits(ctx, res)
	if err != nil {
		return fmt.Errorf("check 8: %w", err)
	}
	res.Checks = append(res.Checks, limits)

	// 9. Rate limits.
	rates, err := o.checkRates(ctx, res)
	if err != nil {
		return fmt.Errorf("check 9: %w", err)
	}
	res.Checks = append(res.Checks, rates)

	// 10. Workflows, and 11. batches.
	wc, wr, err := checkWorkflows(ctx, q)
	if err != nil {
		return fmt.Errorf("check 10: %w", err)
	}
	if o.canc != nil {
		wr.OperatorCancelFailures = o.canc.failures.Load()
	}
	res.Workflows = wr
	missed, err := q.MissedOperatorCancels(ctx)
	if err != nil {
		return fmt.Errorf("check 10: %w", err)
	}
	if len(missed) > 0 {
		var last error
		if o.canc != nil {
			last = o.canc.last()
		}
		o.problem("%d workflows an operator was to cancel have no committed cancel, so check 10 did not hold them to it: %v (the last of %d failed tries: %v)",
			len(missed), missed[:min(len(missed), 20)], wr.OperatorCancelFailures, last)
	}
	bc, br, err := checkBatches(ctx, q)
	if err != nil {
		return fmt.Errorf("check 11: %w", err)
	}
	res.Batches = br
	res.Checks = append(res.Checks, wc, bc)

	replays, err := q.ObserveReplays(ctx)
	if err != nil {
		return err
	}
	obs := Observation{Name: "attempts of a job that started after a later job of its group had started (a lost transaction ran both, both ran again; or a paused process recorded the start of an attempt taken over meanwhile)", N: len(replays)}
	for _, r := range replays[:min(len(replays), 3)] {
		obs.Examples = append(obs.Examples, r.Detail)
	}
	unrecorded, err := q.CountStartsNotRecorded(ctx)
	if err != nil {
		return err
	}
	reused, err := q.ObserveReusedIds(ctx)
	if err != nil {
		return err
	}
	// A poison job whose attempts were all used up before its handler ran
	// (its process killed or its session lost first, its start not
	// recorded, or taken over while its process was paused) kills no
	// process: say which, should the poison fault be missing.
	poison, err := q.PoisonJobs(ctx)
	if err != nil {
		return err
	}
	unreached := Observation{Name: "attempts of poison jobs that did not reach their handler, so killed no process"}
	for _, p := range poison {
		if n := int64(p.Attempts) - p.Reached; n > 0 {
			unreached.N += int(n)
			unreached.Examples = append(unreached.Examples, fmt.Sprintf("job %d %s after %d attempts, %d of which reached the handler; errors %s",
				p.JobID, p.Status, p.Attempts, p.Reached, p.Errors))
		}
	}
	res.Observations = append(res.Observations, obs, takeovers, overLimit,
		Observation{Name: "attempts whose handler could not record its start (database away); accepted by check 5", N: int(unrecorded)},
		Observation{Name: "ids of a transaction that did not commit handed out again after the crash (a crash can rewind a sequence); accepted by check 1", N: int(reused)})
	if unreached.N > 0 {
		res.Observations = append(res.Observations, unreached)
	}

	// Totals.
	pr, err := q.JobProgress(ctx)
	if err != nil {
		return err
	}
	j := &res.Jobs
	j.HandedOut = o.prod.handedOut.Load()
	j.Succeeded, j.Failed, j.Cancelled, j.Unfinished = pr.Succeeded, pr.Failed, pr.Cancelled, pr.Unfinished
	j.ByHow, j.NotCommitted, j.FailedAs = map[string]int64{}, map[string]int64{}, map[string]int64{}
	enq, err := q.EnqueuedTotals(ctx)
	if err != nil {
		return err
	}
	for _, e := range enq {
		j.Committed += e.Jobs
		j.ByHow[e.How] += e.Jobs
		if e.Callback {
			j.Callbacks += e.Jobs
		}
	}
	nc, err := q.NotCommittedTotals(ctx)
	if err != nil {
		return err
	}
	for _, n := range nc {
		j.NotCommitted[n.Reason] = n.Jobs
	}
	fin, err := q.FinishedTotals(ctx)
	if err != nil {
		return err
	}
	for _, f := range fin {
		j.Attempts += f.Attempts
		if f.Status == "failed" {
			j.FailedAs[f.Behavior] += f.Jobs
		}
	}

	outcomes := map[string]int64{}
	oc, err := q.OutcomeTotals(ctx)
	if err != nil {
		return err
	}
	for _, c := range oc {
		outcomes[c.Outcome] = c.Attempts
	}
	// A poison death is one of a process whose poison handler recorded it
	// before sending itself SIGKILL, or that died of a SIGKILL nobody else
	// sent (the record could not be written: the database was away). Its
	// exit alone would miss those the kill loop signalled too, at the same
	// moment.
	poisoned := map[int]bool{}
	pi, err := q.PoisonDeathInstances(ctx)
	if err != nil {
		return err
	}
	for _, i := range pi {
		poisoned[int(i)] = true
	}
	for _, w := range res.Workers {
		if w.Ended == "poison" {
			poisoned[w.Instance] = true
		}
	}
	poisonDeaths := int64(len(poisoned))
	res.Faults = []Count{
		{FaultSigkill, o.sigkills.Load()},
		{FaultPoison, poisonDeaths},
		{FaultTerminate, o.terminations.Load()},
		{FaultInJob, o.terminatedJob.Load()},
		{FaultMid, o.terminatedMid.Load()},
		{FaultRestart, o.restarts.Load()},
		{FaultCrash, o.crashes.Load()},
		{FaultError, outcomes["error"]},
		{FaultPanic, outcomes["panic"]},
		{FaultTimeout, outcomes["timeout"]},
		{FaultNoRetry, outcomes["noretry"]},
		{FaultPause, o.pauses.Load()},
	}

	lt, err := q.LeaseTotals(ctx)
	if err != nil {
		return err
	}
	res.Lease = LeaseReport{
		Lease: o.cfg.lease(), Pauses: o.pauses.Load(),
		TakenOver: lt.TakenOver, TakenWhilePaused: lt.WhilePaused, StaleOutcomes: lt.StaleOutcomes, StaleOnTaken: lt.StaleOnTaken,
		Overlaps: takeovers.N,
	}
	o.mu.Lock()
	res.Long = LongReport{
		Jobs: o.cfg.Long, Waited: o.longWait, Found: o.longFound != nil,
		Away: maps.Clone(o.dbAway), Across: map[string][]LongSpan{},
	}
	landed := o.longFound
	o.mu.Unlock()
	if landed != nil {
		a, err := q.LandedAttempt(ctx, chaosdb.LandedAttemptParams{JobID: landed.JobID, Attempt: landed.Attempt})
		if err != nil {
			// No row when the restart could not be recorded (a problem
			// of the run, reported as such).
			a.Outcome, a.Status = "unknown", "unknown"
		}
		when := "before the server was back"
		if a.EndedAfter {
			when = "after the server was back"
		}
		res.Long.Landed = fmt.Sprintf("job %d attempt %d (lease-mode process %d): its handler ended %s %s; the job %s after %d attempts",
			landed.JobID, landed.Attempt, landed.Instance, a.Outcome, when, a.Status, a.Attempts)
		if a.Outcome == "none" {
			res.Long.Landed = fmt.Sprintf("job %d attempt %d (lease-mode process %d): no end of its handler was recorded (its process died first); the job %s after %d attempts",
				landed.JobID, landed.Attempt, landed.Instance, a.Status, a.Attempts)
		}
		if a.Error != "" {
			res.Long.Landed += "; that attempt's error: " + a.Error
		}
	}
	la, err := q.LongAttemptTotals(ctx, longAttempts)
	if err != nil {
		return err
	}
	for _, r := range la {
		res.Long.Attempts = append(res.Long.Attempts, LongSpan{Mode: r.Mode, Spanned: r.Attempts, Succeeded: r.Succeeded})
	}
	for _, kind := range []string{"restart", "crash"} {
		rows, err := q.LongAcrossDBFault(ctx, kind)
		if err != nil {
			return err
		}
		for _, r := range rows {
			res.Long.Across[kind] = append(res.Long.Across[kind], LongSpan{Mode: r.Mode, Spanned: r.Spanned, Succeeded: r.Succeeded})
		}
	}
	res.Horizon = HorizonReport{
		Enabled: o.cfg.PinHorizon,
		Held:    time.Duration(o.pin.held.Load()), Longest: time.Duration(o.pin.longest.Load()),
		Opens: o.pin.opens.Load(), MaxLag: o.pin.maxLag.Load(),
	}
	o.mu.Lock()
	res.Problems = slices.Clone(o.problems)
	o.mu.Unlock()
	return nil
}

// checkWorkflows makes check 10: workflow steps against their parents'
// outcomes and their policies, and against their workflow's cancel (see
// WorkflowViolations).
func checkWorkflows(ctx context.Context, q *chaosdb.Queries) (Check, WorkflowReport, error) {
	c := newCheck(10, "workflow steps start only as their parents' outcomes and policies allow; none after its workflow's cancel")
	rows, err := q.WorkflowViolations(ctx)
	if err != nil {
		return c, WorkflowReport{}, err
	}
	for _, v := range rows {
		c.add(v.Kind, v.Detail)
	}
	t, err := q.WorkflowTotals(ctx)
	if err != nil {
		return c, WorkflowReport{}, err
	}
	r := WorkflowReport{
		Workflows: t.Workflows, Steps: t.Steps,
		Edges: t.Edges, EdgesCancel: t.EdgesCancel, EdgesAnyway: t.EdgesAnyway, EdgesWorkflow: t.EdgesWorkflow,
		StepsFailed: t.StepsFailed, StepsCancelled: t.StepsCancelled, AnywayRan: t.AnywayRan,
		CancelledByFailure: t.CancelledByFailure, OperatorCancels: t.OperatorCancels, OperatorMarked: t.OperatorMarked,
		OperatorCutShort: t.OperatorCutShort,
	}
	c.Note = fmt.Sprintf("%d dependencies of %d workflows checked; a step's claim is the start of the claim statement of its last attempt (pgtask.jobs.started_at), a cancel's commit its transaction's commit time (stamped just before the commit is visible), and a claim on the cancelling session after its mark (pgtask_chaos.workflow_cancels.at) one in the cancelling transaction itself; a claim in another transaction between the mark and the commit is not held to the mark", r.Edges, r.Workflows)
	return c, r, nil
}

// checkBatches makes check 11: each batch's callbacks ran exactly once, or
// (OnFailure with no failure) never, after what they wait for, and read
// the batch's counts (see CheckBatches).
func checkBatches(ctx context.Context, q *chaosdb.Queries) (Check, BatchReport, error) {
	c := newCheck(11, "each batch's OnFinish runs once after its jobs; OnFailure once if and only if one failed")
	rows, err := q.CheckBatches(ctx)
	if err != nil {
		return c, BatchReport{}, err
	}
	for _, v := range rows {
		c.add(v.Kind, v.Detail)
	}
	t, err := q.BatchTotals(ctx)
	if err != nil {
		return c, BatchReport{}, err
	}
	r := BatchReport{Batches: t.Batches, Jobs: t.Jobs, WithFailure: t.WithFailure,
		FinishRuns: t.FinishRuns, FailureRuns: t.FailureRuns, CallbackAttempts: t.CallbackAttempts}
	c.Note = fmt.Sprintf("%d batches checked, %d of them with a failure; a callback's start is its handler's", r.Batches, r.WithFailure)
	return c, r, nil
}

// checkLimits makes check 8: no limit key ran more jobs at once than its
// limit (from the attempts' record), every limited job counts against its
// key, and every key has all its slots free now that every job has ended,
// with none running or waiting (runtime.Limits). It fills res.Limits, and
// returns the check and the observation of starts over the limit that only
// attempts taken over after their lease expired account for.
func (o *orchestrator) checkLimits(ctx context.Context, res *Result) (Check, Observation, error) {
	c := newCheck(8, "no limit key runs more jobs at once than its limit; slots all free at the end")
	c.Note = "an attempt counts against its key from its start until its handler ended, reckoned as in check 2, or until it was taken over after its lease expired"
	obs := Observation{Name: "starts of limited attempts over their key's limit only counting attempts taken over after their lease expired until their handler ended (lease mode: a hung worker's attempt may still run)"}
	rows, err := o.q.CheckLimits(ctx)
	if err != nil {
		return c, obs, err
	}
	for _, r := range rows {
		if r.Kind == kindTakeoverOverLimit {
			obs.N++
			if len(obs.Examples) < 3 {
				obs.Examples = append(obs.Examples, r.Detail)
			}
			continue
		}
		c.add(r.Kind, r.Detail)
	}
	peaks, err := o.q.LimitPeaks(ctx)
	if err != nil {
		return c, obs, err
	}
	for _, p := range peaks {
		res.Limits = append(res.Limits, LimitReport{Key: p.LimitKey, Limit: int(p.LimitMax), Jobs: p.Jobs, Attempts: p.Attempts,
			Peak: p.Peak, PeakHandlers: p.PeakHandlers})
	}
	// The slots, as pgtask counts them. Every limited job has ended and
	// the workers have stopped: none may be held or waiting.
	infos, err := runtime.Limits(ctx, o.pool, queueName, 0)
	if err != nil {
		return c, obs, err
	}
	seen := map[string]bool{}
	for _, in := range infos {
		seen[in.Key] = true
		want := slices.IndexFunc(limitKeys, func(k limitKey) bool { return k.key == in.Key })
		switch {
		case want < 0:
			c.add("unknown key", fmt.Sprintf("key %q of queue %s has a limit, but no job was enqueued with it: %+v", in.Key, in.Queue, in))
		case in.Limit != limitKeys[want].max || in.Declared != limitKeys[want].max:
			c.add("wrong limit", fmt.Sprintf("key %q has limit %d (declared %d), want %d", in.Key, in.Limit, in.Declared, limitKeys[want].max))
		case in.Free != in.Limit || in.Running != 0 || in.Waiting != 0:
			c.add("slots not free", fmt.Sprintf("key %q (limit %d) has %d slots free, %d jobs running and %d waiting after every job ended",
				in.Key, in.Limit, in.Free, in.Running, in.Waiting))
		}
	}
	for _, r := range res.Limits {
		if !seen[r.Key] {
			c.add("key missing", fmt.Sprintf("key %q had %d jobs enqueued but is not among the queue's limits", r.Key, r.Jobs))
		}
	}
	return c, obs, nil
}

// checkRates makes check 9: no rate key started more of its jobs in any
// second than its burst and its rate allow (by the starts of the jobs'
// last attempts: each attempt takes a token, so they are a part of the
// starts the rate bounds), and no job waits on a key now that every job
// has ended (runtime.Rates). It fills res.Rates.
func (o *orchestrator) checkRates(ctx context.Context, res *Result) (Check, error) {
	c := newCheck(9, "no rate key starts more jobs in any second than its burst plus its rate")
	c.Note = "a job's start is when the claim of its last attempt began (pgtask.jobs.started_at)"
	rows, err := o.q.RateStarts(ctx, queueName)
	if err != nil {
		return c, err
	}
	for start := 0; start < len(rows); {
		end := start
		for end < len(rows) && rows[end].RateKey == rows[start].RateKey {
			end++
		}
		k := rows[start]
		// A second holds the burst and the tokens a second brings.
		allowed := int(float64(k.Burst) + float64(k.Rate)*float64(time.Second.Microseconds())/float64(k.PeriodUs))
		r := RateReport{Key: k.RateKey, Rate: int(float64(k.Rate) * 1e6 / float64(k.PeriodUs)), Burst: int(k.Burst), Jobs: end - start}
		j := start
		for i := start; i < end; i++ {
			for rows[i].StartedAt.Sub(rows[j].StartedAt) >= time.Second {
				j++
			}
			if n := i - j + 1; n > r.MostInASecond {
				r.MostInASecond = n
				if n > allowed {
					c.add("over rate", fmt.Sprintf("key %q (%d a second, burst %d): %d jobs started from %s to %s",
						k.RateKey, r.Rate, r.Burst, n, rows[j].StartedAt.Format("15:04:05.000000"), rows[i].StartedAt.Format("15:04:05.000000")))
				}
			}
		}
		res.Rates = append(res.Rates, r)
		start = end
	}
	infos, err := runtime.Rates(ctx, o.pool, queueName, 0)
	if err != nil {
		return c, err
	}
	for _, in := range infos {
		if in.Waiting != 0 {
			c.add("jobs waiting", fmt.Sprintf("key %q has %d jobs waiting after every job ended", in.Key, in.Waiting))
		}
	}
	return c, nil
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// Print writes the summary tables.
func (r *Result) Print(w io.Writer) {
	cfg := r.Config
	status := "finished"
	if !r.Finished {
		status = fmt.Sprintf("DID NOT FINISH within %s (%d jobs unfinished)", cfg.Timeout, r.Jobs.Unfinished)
	}
	fmt.Fprintf(w, "\npgtask-chaos summary: seed %d, %d worker processes, %s in %s (checks took %s)\n\n",
		cfg.Seed, cfg.Workers, status, r.Duration.Round(100*time.Millisecond), r.CheckDuration.Round(100*time.Millisecond))

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	j := r.Jobs
	fmt.Fprintln(tw, "jobs\t")
	fmt.Fprintf(tw, "  enqueued (ids handed out)\t%10d\n", j.HandedOut)
	fmt.Fprintf(tw, "  committed\t%10d\n", j.Committed)
	for _, how := range slices.Sorted(maps.Keys(j.ByHow)) {
		fmt.Fprintf(tw, "    by %s\t%10d\n", map[string]string{howEnqueueMany: "EnqueueMany", howEnqueue: "Enqueue", howWorkflow: "Workflow.Enqueue",
			howEnqueueBatch: "EnqueueBatch (jobs and callbacks)"}[how], j.ByHow[how])
	}
	var rolled int64
	for _, n := range j.NotCommitted {
		rolled += n
	}
	fmt.Fprintf(tw, "  rolled back\t%10d\n", rolled)
	for _, reason := range slices.Sorted(maps.Keys(j.NotCommitted)) {
		label := map[string]string{
			"rollback":  "transaction rolled back",
			"savepoint": "rolled back to a savepoint",
			"failed":    "transaction cut off by a fault",
		}[reason]
		fmt.Fprintf(tw, "    %s\t%10d\n", label, j.NotCommitted[reason])
	}
	fmt.Fprintf(tw, "  succeeded\t%10d\n", j.Succeeded)
	fmt.Fprintf(tw, "  failed\t%10d\n", j.Failed)
	for _, b := range slices.Sorted(maps.Keys(j.FailedAs)) {
		fmt.Fprintf(tw, "    %s\t%10d\n", b, j.FailedAs[b])
	}
	fmt.Fprintf(tw, "  cancelled\t%10d\n", j.Cancelled)
	if j.Unfinished > 0 {
		fmt.Fprintf(tw, "  unfinished\t%10d\n", j.Unfinished)
	}
	fmt.Fprintf(tw, "  attempts\t%10d\n", j.Attempts)
	fmt.Fprintln(tw, "\t")
	fmt.Fprintln(tw, "faults injected\t")
	for _, f := range r.Faults {
		fmt.Fprintf(tw, "  %s\t%10d\n", f.Name, f.N)
	}
	fmt.Fprintln(tw, "\t")
	l := r.Lease
	fmt.Fprintf(tw, "lease mode (lease %s; a paused process stays stopped %s)\t\n", l.Lease, 2*l.Lease)
	fmt.Fprintf(tw, "  processes paused\t%10d\n", l.Pauses)
	fmt.Fprintf(tw, "  attempts taken over after their lease expired\t%10d\n", l.TakenOver)
	fmt.Fprintf(tw, "    of which while a process was paused\t%10d\n", l.TakenWhilePaused)
	fmt.Fprintf(tw, "  late outcomes refused (sum of jobs.stale_outcomes)\t%10d\n", l.StaleOutcomes)
	fmt.Fprintf(tw, "    of which on jobs taken over\t%10d\n", l.StaleOnTaken)
	fmt.Fprintf(tw, "  overlaps after a takeover (observation, check 2)\t%10d\n", l.Overlaps)
	fmt.Fprintln(tw, "\t")
	lj := r.Long
	fmt.Fprintf(tw, "long jobs (%s to %s of work on their first %d attempts)\t%10d\n", longWork, longWork+longJitter, longAttempts, lj.Jobs)
	for _, sp := range lj.Attempts {
		fmt.Fprintf(tw, "  long attempts in %s mode (recorded the job's success)\t%10d  (%d)\n", sp.Mode, sp.Spanned, sp.Succeeded)
	}
	if _, ok := lj.Away["restart"]; ok && lj.Jobs > 0 {
		found := "found one"
		if !lj.Found {
			found = "found none"
		}
		fmt.Fprintf(tw, "  the restart waited for one in a lease-mode process\t%10s  (%s)\n", lj.Waited.Round(100*time.Millisecond), found)
	}
	for _, kind := range []string{"restart", "crash"} {
		away, ok := lj.Away[kind]
		if !ok {
			continue
		}
		var spanned, succeeded int64
		for _, sp := range lj.Across[kind] {
			spanned += sp.Spanned
			succeeded += sp.Succeeded
		}
		fmt.Fprintf(tw, "  the database's %s: away for\t%10s\n", kind, away.Round(100*time.Millisecond))
		fmt.Fprintf(tw, "    long attempts that spanned it (recorded the job's success)\t%10d  (%d)\n", spanned, succeeded)
		for _, sp := range lj.Across[kind] {
			fmt.Fprintf(tw, "      in %s mode\t%10d  (%d)\n", sp.Mode, sp.Spanned, sp.Succeeded)
		}
	}
	if h := r.Horizon; h.Enabled {
		fmt.Fprintln(tw, "\t")
		fmt.Fprintln(tw, "vacuum horizon pinned by a transaction open beside the run\t")
		fmt.Fprintf(tw, "  held, in all\t%10s  of the run's %s\n", h.Held.Round(100*time.Millisecond), r.Duration.Round(100*time.Millisecond))
		fmt.Fprintf(tw, "  held at once, at most\t%10s\n", h.Longest.Round(100*time.Millisecond))
		fmt.Fprintf(tw, "  opened (again after the database ended it)\t%10d\n", h.Opens)
		fmt.Fprintf(tw, "  transaction ids handed out behind it, at most\t%10d\n", h.MaxLag)
	}
	if wf := r.Workflows; wf.Workflows > 0 {
		fmt.Fprintln(tw, "\t")
		fmt.Fprintln(tw, "workflows\t")
		fmt.Fprintf(tw, "  workflows (their steps)\t%10d  (%d)\n", wf.Workflows, wf.Steps)
		fmt.Fprintf(tw, "  dependencies: After, Anyway, OrCancelWorkflow\t%10d  (%d, %d, %d)\n", wf.Edges, wf.EdgesCancel, wf.EdgesAnyway, wf.EdgesWorkflow)
		fmt.Fprintf(tw, "  steps failed for good\t%10d\n", wf.StepsFailed)
		fmt.Fprintf(tw, "  steps cancelled\t%10d\n", wf.StepsCancelled)
		fmt.Fprintf(tw, "  steps run Anyway after a parent failed or was cancelled\t%10d\n", wf.AnywayRan)
		fmt.Fprintf(tw, "  workflows cancelled by a failure (OrCancelWorkflow)\t%10d\n", wf.CancelledByFailure)
		fmt.Fprintf(tw, "  operator's cancels committed (marked the workflow)\t%10d  (%d)\n", wf.OperatorCancels, wf.OperatorMarked)
		fmt.Fprintf(tw, "    of which cut steps short (some ended cancelled)\t%10d\n", wf.OperatorCutShort)
		if wf.OperatorCancelFailures > 0 {
			fmt.Fprintf(tw, "  operator's tries to cancel that failed and were tried again\t%10d\n", wf.OperatorCancelFailures)
		}
	}
	if b := r.Batches; b.Batches > 0 {
		fmt.Fprintln(tw, "\t")
		fmt.Fprintln(tw, "batches (EnqueueBatch, OnFinish and OnFailure callbacks)\t")
		fmt.Fprintf(tw, "  batches (their jobs)\t%10d  (%d)\n", b.Batches, b.Jobs)
		fmt.Fprintf(tw, "    with a job failed for good\t%10d\n", b.WithFailure)
		fmt.Fprintf(tw, "  OnFinish runs committed\t%10d\n", b.FinishRuns)
		fmt.Fprintf(tw, "  OnFailure runs committed\t%10d\n", b.FailureRuns)
		fmt.Fprintf(tw, "  callback attempts started\t%10d\n", b.CallbackAttempts)
	}
	if len(r.Limits) > 0 {
		fmt.Fprintln(tw, "\t")
		fmt.Fprintf(tw, "concurrency limits of queue %s (its held and lease processes alike)\t\n", queueName)
		for _, l := range r.Limits {
			name := fmt.Sprintf("key %q: limit", l.Key)
			if l.Key == "" {
				name = "the queue's own limit"
			}
			fmt.Fprintf(tw, "  %s\t%10d\n", name, l.Limit)
			fmt.Fprintf(tw, "    jobs (their attempts)\t%10d  (%d)\n", l.Jobs, l.Attempts)
			fmt.Fprintf(tw, "    most running at once (counting taken-over handlers)\t%10d  (%d)\n", l.Peak, l.PeakHandlers)
		}
	}
	if len(r.Rates) > 0 {
		fmt.Fprintln(tw, "\t")
		fmt.Fprintf(tw, "rate limits of queue %s (its held and lease processes alike)\t\n", queueName)
		for _, l := range r.Rates {
			fmt.Fprintf(tw, "  key %q: jobs a second (burst)\t%10d  (%d)\n", l.Key, l.Rate, l.Burst)
			fmt.Fprintf(tw, "    jobs started\t%10d\n", l.Jobs)
			fmt.Fprintf(tw, "    most started in any second\t%10d\n", l.MostInASecond)
		}
	}
	fmt.Fprintln(tw, "\t")
	fmt.Fprintf(tw, "invariants\t%10s\n", "violations")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "  %d. %s\t%10d\n", c.Number, c.Name, c.Violations)
	}
	tw.Flush()

	for _, c := range r.Checks {
		if c.Violations == 0 {
			continue
		}
		var kinds []string
		for _, k := range slices.Sorted(maps.Keys(c.ByKind)) {
			kinds = append(kinds, fmt.Sprintf("%s: %d", k, c.ByKind[k]))
		}
		fmt.Fprintf(w, "\ninvariant %d violated (%s); examples:\n", c.Number, strings.Join(kinds, ", "))
		for _, e := range c.Examples {
			fmt.Fprintf(w, "  - %s\n", e)
		}
	}
	if len(r.Observations) > 0 {
		fmt.Fprintln(w, "\nobservations (not violations):")
		for _, o := range r.Observations {
			fmt.Fprintf(w, "  %d %s\n", o.N, o.Name)
			for _, e := range o.Examples {
				fmt.Fprintf(w, "      %s\n", e)
			}
		}
	}
	for _, c := range r.Checks {
		if c.Note != "" {
			fmt.Fprintf(w, "note on %d: %s\n", c.Number, c.Note)
		}
	}
	if r.Long.Landed != "" {
		fmt.Fprintf(w, "the restart landed in long %s\n", r.Long.Landed)
	}

	fmt.Fprintf(w, "\nworker processes: %d started; RSS of those that lived at least %s (memory judged), and of each slot's last:\n",
		len(r.Workers), cfg.RSSMinLife)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  process\tslot\tbatch\tconc\tlived\trss start\trss end\trss peak\tended\t")
	last := map[int]int{}
	for i, p := range r.Workers {
		last[p.Slot] = i
	}
	var others []WorkerReport
	for i, p := range r.Workers {
		if !p.Judged && last[p.Slot] != i {
			others = append(others, p)
			continue
		}
		mark := ""
		if p.Grew {
			mark = "  GREW"
		}
		fmt.Fprintf(tw, "  %d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s%s\t\n", p.Instance, p.Slot, p.Batch, p.Concurrency,
			p.Lived.Round(time.Second), formatKiB(p.RSSStart), formatKiB(p.RSSEnd), formatKiB(p.RSSPeak), p.Ended, mark)
	}
	tw.Flush()
	if len(others) > 0 {
		ended := map[string]int{}
		var maxEnd int64
		for _, p := range others {
			ended[p.Ended]++
			maxEnd = max(maxEnd, p.RSSPeak)
		}
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(ended)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, ended[k]))
		}
		fmt.Fprintf(w, "  and %d shorter-lived processes (%s), peak rss at most %s\n", len(others), strings.Join(parts, ", "), formatKiB(maxEnd))
	}

	if len(r.Problems) > 0 {
		fmt.Fprintf(w, "\nproblems with the run:\n")
		for _, p := range r.Problems {
			fmt.Fprintf(w, "  - %s\n", p)
		}
	}
	fmt.Fprintf(w, "\nworker logs: %s\n", cfg.LogDir)
	switch {
	case r.OK():
		fmt.Fprintln(w, "PASS: no violations")
	case !r.Finished:
		fmt.Fprintf(w, "FAIL: the run did not finish; %d violations\n", r.Violations())
	case len(r.Problems) > 0:
		fmt.Fprintf(w, "FAIL: %d violations, %d problems with the run\n", r.Violations(), len(r.Problems))
	default:
		fmt.Fprintf(w, "FAIL: %d violations\n", r.Violations())
	}
}
