package chaos_test

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/pgtask/pgtask/tools/cmd/pgtask-chaos/internal/chaos"
)

// roleEnv makes the test binary a chaos worker process: the run below
// starts its worker processes by running this test binary again with it set.
const roleEnv = "PGTASK_CHAOS_TEST_ROLE"

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "worker" {
		os.Exit(chaos.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	code := m.Run()
	chaos.CloseCheckCluster()
	os.Exit(code)
}

// TestChaos is the short chaos run: 4 worker processes (this test binary run
// again, so built with -race when the test is), 3,000 jobs over 100 groups
// and 150 jobs under concurrency limits, workflows whose steps fail and are
// cancelled and batches with callbacks, with every fault at least once, a
// lease-mode process paused past its 3s lease, 6 long jobs around the
// database's restart and a transaction held open beside it all. It fails on any violation of pgtask's guarantees and on
// a fault that was not injected. PGTASK_CHAOS_SEED repeats a run's choices.
func TestChaos(t *testing.T) {
	t.Parallel()
	cfg := chaos.DefaultConfig()
	cfg.Jobs = 3_000
	cfg.Groups = 100
	cfg.Ungrouped = 300
	cfg.Limited = 150
	// The chaos queue is fair: the claims of a fair queue face every fault.
	cfg.Tenants = 4
	// Two, so that "poison job SIGKILLed its own process" is not missed
	// when one's three attempts all end before its handler runs (its
	// process killed first, mid-batch).
	cfg.Poison = 2
	cfg.ProduceOver = 10 * time.Second
	cfg.KillEvery = time.Second
	cfg.TerminateEvery = 150 * time.Millisecond
	cfg.RestartDB, cfg.CrashDB = true, true
	cfg.Long = 6
	cfg.Lease = 3 * time.Second
	cfg.PauseEvery = 5 * time.Second
	cfg.PinHorizon = true
	// It took 40 to 110 seconds here, and up to 5 minutes beside the
	// runtime package's tests; the rest is room for a loaded machine (go
	// test runs other packages' tests beside it).
	cfg.Timeout = 8 * time.Minute
	cfg.Progress = 5 * time.Second
	cfg.RSSMinLife = 3 * time.Second
	if s := os.Getenv("PGTASK_CHAOS_SEED"); s != "" {
		seed, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("PGTASK_CHAOS_SEED: %v", err)
		}
		cfg.Seed = seed
	}
	// Kept when the test fails, for the workers' logs.
	dir, err := os.MkdirTemp("", "pgtask-chaos-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(dir)
		}
	})
	cfg.LogDir = dir
	cfg.Exe = os.Args[0]
	cfg.Env = []string{roleEnv + "=worker"}
	var progress bytes.Buffer
	cfg.Out = &progress

	res, err := chaos.Run(t.Context(), cfg)
	t.Log("\n" + progress.String())
	if res != nil {
		var summary bytes.Buffer
		res.Print(&summary)
		t.Log(summary.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	// The failures are reported after everything logged: the progress and
	// the summary run to hundreds of lines, and a log cut in the middle
	// keeps its end.
	var failures []string
	errorf := func(format string, args ...any) { failures = append(failures, fmt.Sprintf(format, args...)) }
	defer func() {
		for _, f := range failures {
			t.Error(f)
		}
	}()

	if !res.Finished {
		errorf("the run did not finish within %s", cfg.Timeout)
	}
	for _, c := range res.Checks {
		if c.Violations > 0 {
			errorf("invariant %d (%s): %d violations %v, e.g. %q", c.Number, c.Name, c.Violations, c.ByKind, c.Examples)
		}
	}
	for _, p := range res.Problems {
		errorf("run problem: %s", p)
	}
	for _, f := range []string{
		chaos.FaultSigkill, chaos.FaultPoison, chaos.FaultTerminate, chaos.FaultInJob, chaos.FaultMid,
		chaos.FaultRestart, chaos.FaultCrash,
		chaos.FaultError, chaos.FaultPanic, chaos.FaultTimeout, chaos.FaultNoRetry,
		chaos.FaultPause,
	} {
		if res.Fault(f) == 0 {
			errorf("fault %q was never injected", f)
		}
	}
	// Without a process that lived long enough, memory was not checked.
	judged := 0
	for _, w := range res.Workers {
		if w.Judged {
			judged++
		}
	}
	if judged == 0 {
		errorf("no worker process lived %s, so memory growth was not judged", cfg.RSSMinLife)
	}
	j := res.Jobs
	if want := int64(cfg.Jobs); j.Committed-j.Callbacks != want || j.Succeeded+j.Failed+j.Cancelled != j.Committed {
		errorf("committed %d (%d of them callbacks), succeeded %d, failed %d, cancelled %d; want %d jobs and the callbacks finished",
			j.Committed, j.Callbacks, j.Succeeded, j.Failed, j.Cancelled, want)
	}
	// Some jobs were workflow steps, some of them cancelled after a failure
	// or by an operator, so check 10 held steps to failed parents and to
	// their workflow's cancel; and some were batches, with a failure and
	// without, so check 11 held both kinds of callback to their batch.
	if w := res.Workflows; j.ByHow["workflow"] == 0 || w.StepsCancelled == 0 || w.OperatorCancels == 0 ||
		w.AnywayRan == 0 || w.CancelledByFailure == 0 {
		errorf("workflows %+v: want some, with cancelled steps, a step run after a failed parent under Anyway, "+
			"one cancelled by a failure and one by an operator", w)
	}
	if b := res.Batches; j.ByHow["enqueue_batch"] == 0 || b.WithFailure == 0 || b.Batches <= b.WithFailure ||
		b.FailureRuns == 0 || b.FinishRuns == 0 {
		errorf("batches %+v: want some, with a failure and without, and callbacks of both kinds run", b)
	}
	t.Logf("workflows %+v; batches %+v", res.Workflows, res.Batches)
	if res.Jobs.NotCommitted["rollback"] == 0 || res.Jobs.NotCommitted["savepoint"] == 0 {
		errorf("no rolled-back enqueues to check: %v", res.Jobs.NotCommitted)
	}
	// Each limit key ran several jobs at once (every limit here is 2 or
	// more), so check 8 counted real overlaps. Reaching the limit itself in
	// a run this short depends on the machine's timing: the full run
	// reports each key's peak.
	if len(res.Limits) != 3 {
		errorf("limit keys %+v, want 3", res.Limits)
	}
	for _, l := range res.Limits {
		if l.Peak < 2 {
			errorf("key %q: at most %d attempts ran at once (its limit %d): the limit serialised them", l.Key, l.Peak, l.Limit)
		}
	}
	// Both rate keys started jobs, so check 9 counted real starts; one in
	// four of the limited jobs has a rate.
	if len(res.Rates) != 2 {
		errorf("rate keys %+v, want 2", res.Rates)
	}
	for _, r := range res.Rates {
		if r.Jobs == 0 || r.MostInASecond == 0 {
			errorf("rate key %q: %d jobs started, at most %d in a second", r.Key, r.Jobs, r.MostInASecond)
		}
	}
	t.Logf("rate keys: %+v", res.Rates)
	// The pinning transaction was held, and opened again after the restart
	// and the crash ended it.
	if h := res.Horizon; h.Held <= 0 || h.Opens <= res.Fault(chaos.FaultRestart)+res.Fault(chaos.FaultCrash) {
		errorf("the vacuum horizon was not pinned throughout: held %s, opened %d times", h.Held, h.Opens)
	}
	// A paused process may have had nothing in flight, so none of these is
	// required; they are printed for the record.
	t.Logf("pauses %d, attempts taken over %d (%d while paused), late outcomes refused %d, overlaps after a takeover %d; long jobs across the restart %v (waited %s, found %v)",
		res.Lease.Pauses, res.Lease.TakenOver, res.Lease.TakenWhilePaused, res.Lease.StaleOutcomes, res.Lease.Overlaps,
		res.Long.Across["restart"], res.Long.Waited, res.Long.Found)
}
