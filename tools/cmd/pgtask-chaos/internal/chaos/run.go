package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-chaos/internal/chaosdb"
	chaosschema "github.com/pgtask/pgtask/tools/sql/chaos/schema"
)

// Restart and crash happen once this share of the jobs has finished.
const (
	restartAt = 0.3
	crashAt   = 0.6
)

// clusterSettings are the run's server settings: check 10 reads the commit
// times of the transactions that cancelled workflows.
var clusterSettings = []string{"track_commit_timestamp=on"}

// orchestrator is one run.
type orchestrator struct {
	cfg     Config
	out     io.Writer
	cluster *pgtasktest.Cluster
	url     string
	pool    *pgxpool.Pool
	q       *chaosdb.Queries
	prod    *production
	began   time.Time

	fleet *fleet

	sigkills      atomic.Int64
	terminations  atomic.Int64
	terminatedJob atomic.Int64 // of which the session was in a transaction
	terminatedMid atomic.Int64 // of which the session's handler was running
	restarts      atomic.Int64
	crashes       atomic.Int64
	pauses        atomic.Int64

	// faultMu makes picking a process (or session) and signalling it one
	// step, so that the kill and terminate loops never pick a process (or
	// a session of one) the pause loop is stopping.
	faultMu sync.Mutex
	// pauseGate is held for a pause and for a database fault: a process
	// paused while the database restarts could not reconnect, and would
	// look dead rather than hung. dbFaultEnded (UnixNano) is when the last
	// database fault ended; pauses wait pauseQuiet after it.
	pauseGate    sync.Mutex
	dbFaultEnded atomic.Int64

	pin horizonPin

	// Set by databaseFaults, under mu.
	longWait  time.Duration                   // how long the restart waited for a long attempt in a lease-mode process
	longFound *chaosdb.LongAttemptsRunningRow // the attempt it found, if it did
	dbAway    map[string]time.Duration        // how long each database fault took, until the server answered

	progress atomic.Pointer[chaosdb.JobProgressRow]

	canc *canceller // the operator who cancels workflows; nil before the producers start

	mu       sync.Mutex
	problems []string // failures of the run itself (not of pgtask)

	outMu sync.Mutex
}

// printf writes a line to the run's output; goroutines share it.
func (o *orchestrator) printf(format string, args ...any) {
	o.outMu.Lock()
	defer o.outMu.Unlock()
	fmt.Fprintf(o.out, format, args...)
}

func (o *orchestrator) problem(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.problems = append(o.problems, fmt.Sprintf(format, args...))
}

// Run runs cfg: it starts a throwaway cluster, worker processes and the
// producer, injects faults until every job has finished (or cfg.Timeout
// passes), stops everything and checks the record. The error is for a run
// that could not be carried out; what it found is in the Result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano()%1_000_000_000 + 1
	}
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	if cfg.Exe == "" {
		cfg.Exe = os.Args[0]
	}
	if cfg.Progress <= 0 {
		cfg.Progress = 5 * time.Second
	}
	if cfg.LogDir == "" {
		dir, err := os.MkdirTemp("", "pgtask-chaos-")
		if err != nil {
			return nil, err
		}
		cfg.LogDir = dir
	} else if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
		return nil, err
	}
	o := &orchestrator{cfg: cfg, out: cfg.Out, began: time.Now(), dbAway: map[string]time.Duration{}}
	o.printf("pgtask-chaos: seed %d, %d worker processes, %d jobs (%d groups, %d ungrouped, %d limited, %d poison, %d long), lease %s, timeout %s\n",
		cfg.Seed, cfg.Workers, cfg.Jobs, cfg.Groups, cfg.Ungrouped, cfg.Limited, cfg.Poison, cfg.Long, cfg.lease(), cfg.Timeout)
	o.printf("pgtask-chaos: worker logs in %s\n", cfg.LogDir)

	// Commit times of the transactions that cancel workflows, for check 10
	// (see pgtask_chaos.workflow_cancels).
	cluster, err := pgtasktest.StartCluster(ctx, pgtasktest.ClusterOptions{Settings: clusterSettings})
	if err != nil {
		return nil, err
	}
	defer cluster.Close() //nolint:errcheck // the run is over; its directory goes
	o.cluster = cluster
	o.url = cluster.URL("postgres")
	pc, err := pgxpool.ParseConfig(o.url)
	if err != nil {
		return nil, err
	}
	pc.ConnConfig.RuntimeParams["application_name"] = "pgtask-chaos"
	pc.MaxConns = producerCount + 4
	if o.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return nil, err
	}
	defer o.pool.Close()
	o.q = chaosdb.New(o.pool)
	if _, err := runtime.Migrate(ctx, o.pool); err != nil {
		return nil, err
	}
	if _, err := o.pool.Exec(ctx, chaosschema.SQL); err != nil {
		return nil, fmt.Errorf("create the chaos schema: %w", err)
	}

	res := &Result{Config: cfg}
	finished := o.run(ctx)
	res.Duration = time.Since(o.began)
	res.Finished = finished

	// The run is over; what is left is reading the record, which must
	// happen even when the run was cut short.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	checking := time.Now()
	err = o.collect(cctx, res)
	res.CheckDuration = time.Since(checking)
	if err != nil {
		return res, err
	}
	if cfg.Inspect != nil {
		cfg.Inspect(res, o.url)
	}
	return res, nil
}

// run runs workers, producer and faults until every job finished, the
// timeout or ctx ends, then stops them all. It reports whether the run
// finished.
func (o *orchestrator) run(ctx context.Context) bool {
	cfg := o.cfg
	runCtx, cancelRun := context.WithTimeout(ctx, cfg.Timeout)
	defer cancelRun()

	// The transaction that pins the vacuum horizon, open before the workers
	// start and until they have stopped.
	pinCtx, stopPin := context.WithCancel(ctx)
	var pinWG sync.WaitGroup
	if cfg.PinHorizon {
		pinWG.Go(func() { o.pinHorizon(pinCtx) })
	}
	defer func() { stopPin(); pinWG.Wait() }()

	o.fleet = newFleet(o)
	o.fleet.start(cfg.Workers)

	// The producer.
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 1))
	items, groups, long, limited := plan(cfg, rng, producerCount)
	o.prod = &production{pool: o.pool, total: cfg.Jobs, over: cfg.ProduceOver, begin: time.Now(), anomalies: make(chan string, 100)}
	prodDone := make(chan struct{})
	var pwg sync.WaitGroup
	producers := make([]*producer, producerCount, producerCount+2)
	for i := range producerCount {
		producers[i] = &producer{production: o.prod, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(10+i))), items: items[i], groups: groups[i]}
		// Each producer's turns start at its index, so that even a short
		// run, with a workflow or a batch or two per producer, has
		// workflows both cancelled by an operator and not, and batches
		// both with a failure and without.
		producers[i].flows, producers[i].batches = i, i
	}
	if len(long) > 0 {
		producers = append(producers, &producer{
			production: o.prod, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 9)), items: long,
			marks: longMarks(len(long)), share: o.finishedShare,
		})
	}
	if len(limited) > 0 {
		lp := &producer{production: o.prod, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 8)), items: limited, limited: true}
		lp.own.total = len(limited)
		producers = append(producers, lp)
	}
	// The operator who cancels workflows while they run: done once the
	// producers are done and it has cancelled what they planned.
	canc := &canceller{pool: o.pool, in: make(chan plannedCancel, 1<<14)}
	o.canc = canc
	o.prod.cancels = canc.in
	cancDone := make(chan struct{})
	go func() { canc.run(runCtx); close(cancDone) }()
	for i, p := range producers {
		pwg.Go(func() {
			if err := p.run(runCtx); err != nil && runCtx.Err() == nil {
				o.problem("producer %d: %v", i, err)
			}
		})
	}
	go func() { pwg.Wait(); close(canc.in); <-cancDone; close(prodDone) }()

	// The faults.
	faultCtx, stopFaults := context.WithCancel(runCtx)
	var fwg sync.WaitGroup
	if cfg.KillEvery > 0 {
		fwg.Go(func() { o.killLoop(faultCtx, rand.New(rand.NewPCG(uint64(cfg.Seed), 2))) })
	}
	if cfg.TerminateEvery > 0 {
		fwg.Go(func() { o.terminateLoop(faultCtx, rand.New(rand.NewPCG(uint64(cfg.Seed), 3))) })
	}
	if cfg.RestartDB || cfg.CrashDB {
		fwg.Go(func() { o.databaseFaults(faultCtx) })
	}
	if o.pausing() {
		fwg.Go(func() { o.pauseLoop(faultCtx, rand.New(rand.NewPCG(uint64(cfg.Seed), 4))) })
	}

	finished := o.monitor(runCtx, prodDone)
	// The fault loops end first: the pause loop continues the process it
	// paused, which could not stop otherwise.
	stopFaults()
	fwg.Wait()
	cancelRun()
	<-prodDone
	o.fleet.stopAll()
	return finished
}

// finishedShare is the share of the run's jobs and of the batches'
// callbacks committed so far that have finished, as the monitor last saw
// it.
func (o *orchestrator) finishedShare() float64 {
	pr := o.progress.Load()
	if pr == nil {
		return 0
	}
	return float64(pr.Succeeded+pr.Failed+pr.Cancelled) / float64(int64(o.cfg.Jobs)+o.prod.callbacks.Load())
}

// pausing reports whether the run pauses lease-mode processes: it is asked
// to, and some slot runs in lease mode.
func (o *orchestrator) pausing() bool {
	return o.cfg.PauseEvery > 0 && o.fleet.leaseSlots() > 0
}

// limitsSettle bounds how long the run waits, once every job has finished,
// for the limit keys' slots to be all free: a slot a finished job could not
// give back at once (its key's row was locked) comes back with a
// maintenance round. Check 8 reports a key still short of its slots.
const limitsSettle = 10 * time.Second

// monitor polls the jobs' progress, prints a line now and then, and returns
// true once the producer is done, every job has finished, every enabled
// fault has happened at least once and every limit key has its slots free
// (or limitsSettle has passed since the rest was so); false if ctx ends
// first.
func (o *orchestrator) monitor(ctx context.Context, prodDone <-chan struct{}) bool {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastPrint := time.Now()
	var doneAt time.Time // when the rest was done, the limits aside
	for {
		select {
		case <-ctx.Done():
			o.printProgress()
			return false
		case <-tick.C:
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		pr, err := o.q.JobProgress(qctx)
		cancel()
		if err == nil {
			o.progress.Store(&pr)
		}
		produced := false
		select {
		case <-prodDone:
			produced = true
		default:
		}
		if err == nil && produced && pr.Unfinished == 0 && o.faultsDone() {
			if doneAt.IsZero() {
				doneAt = time.Now()
			}
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			idle, err := o.limitsIdle(qctx)
			cancel()
			if (err == nil && idle) || time.Since(doneAt) > limitsSettle {
				o.printProgress()
				return true
			}
		} else {
			doneAt = time.Time{}
		}
		if time.Since(lastPrint) >= o.cfg.Progress {
			o.printProgress()
			lastPrint = time.Now()
		}
	}
}

// limitsIdle reports whether every limit key of the chaos queue has all its
// slots free, and no job running or waiting.
func (o *orchestrator) limitsIdle(ctx context.Context) (bool, error) {
	infos, err := runtime.Limits(ctx, o.pool, queueName, 0)
	if err != nil {
		return false, err
	}
	for _, in := range infos {
		if in.Free != in.Limit || in.Running != 0 || in.Waiting != 0 {
			return false, nil
		}
	}
	return true, nil
}

// faultsDone reports whether every enabled fault has been injected.
func (o *orchestrator) faultsDone() bool {
	cfg := o.cfg
	return (cfg.KillEvery <= 0 || o.sigkills.Load() > 0) &&
		(cfg.TerminateEvery <= 0 || o.terminations.Load() > 0) &&
		(!cfg.RestartDB || o.restarts.Load() > 0) &&
		(!cfg.CrashDB || o.crashes.Load() > 0) &&
		(!o.pausing() || o.pauses.Load() > 0)
}

func (o *orchestrator) printProgress() {
	pr := o.progress.Load()
	if pr == nil {
		pr = &chaosdb.JobProgressRow{}
	}
	o.printf("%7.1fs  committed %d/%d  succeeded %d  failed %d  cancelled %d  unfinished %d (running %d)  kills %d  poison deaths %d  terminations %d  pauses %d  restarts %d  crashes %d\n",
		time.Since(o.began).Seconds(), o.prod.committed.Load(), o.cfg.Jobs, pr.Succeeded, pr.Failed, pr.Cancelled, pr.Unfinished, pr.Running,
		o.sigkills.Load(), o.fleet.poisonDeaths.Load(), o.terminations.Load(), o.pauses.Load(), o.restarts.Load(), o.crashes.Load())
}

// jittered is d spread uniformly over [d/2, 3d/2).
func jittered(rng *rand.Rand, d time.Duration) time.Duration {
	return d/2 + time.Duration(rng.Int64N(int64(d)))
}

// killLoop SIGKILLs a random worker process now and then. The death is
// recorded first, so the process was alive at the recorded time.
func (o *orchestrator) killLoop(ctx context.Context, rng *rand.Rand) {
	for {
		sleep(ctx, jittered(rng, o.cfg.KillEvery))
		if ctx.Err() != nil {
			return
		}
		o.killOne(ctx, rng)
	}
}

func (o *orchestrator) killOne(ctx context.Context, rng *rand.Rand) {
	o.faultMu.Lock()
	defer o.faultMu.Unlock()
	for _, p := range o.fleet.idle() {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		started, err := o.q.InstanceStartedAnAttempt(qctx, int64(p.instance))
		cancel()
		if err == nil && started {
			p.working.Store(true)
		}
	}
	p := o.fleet.victim(rng)
	if p == nil {
		return
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := o.q.RecordDeath(qctx, chaosdb.RecordDeathParams{Instance: int32(p.instance), Pid: int32(p.pid), Kind: "sigkill"})
	cancel()
	if err != nil {
		return // the database is away; kill another time
	}
	if o.fleet.kill(p) {
		o.sigkills.Add(1)
	}
}

// pauseLoop now and then stops a lease-mode worker process (SIGSTOP) for
// twice its lease, as a process that hangs (a long GC pause, a stuck
// disk, a debugger) would: its leases run out, other workers' maintenance
// takes its jobs over, and when it is continued (SIGCONT) the outcomes of
// its handlers for those attempts must be refused. The pause is recorded
// before the signal and the resumption after it. The process is always
// continued, also when the run ends meanwhile.
func (o *orchestrator) pauseLoop(ctx context.Context, rng *rand.Rand) {
	wait := jittered(rng, o.cfg.PauseEvery)
	for {
		sleep(ctx, wait)
		if ctx.Err() != nil {
			return
		}
		if o.pauseOne(ctx, rng) {
			wait = jittered(rng, o.cfg.PauseEvery)
		} else {
			// No process to pause now (all young, spared, or the database
			// just came back): try again soon.
			wait = 250 * time.Millisecond
		}
	}
}

// pauseQuiet is how long after a database fault no process is paused:
// by then the lease-mode processes have reconnected. pauseMinAge is how long
// a process must have run to be paused: its memory's first reading
// (rssWarmup) is taken while it runs.
const (
	pauseQuiet  = 5 * time.Second
	pauseMinAge = rssWarmup + time.Second
)

// pauseOne pauses a process, if it can, and reports whether it did.
func (o *orchestrator) pauseOne(ctx context.Context, rng *rand.Rand) bool {
	o.pauseGate.Lock()
	defer o.pauseGate.Unlock()
	if time.Since(time.Unix(0, o.dbFaultEnded.Load())) < pauseQuiet {
		return false
	}
	o.faultMu.Lock()
	cands := o.fleet.leaseProcs(pauseMinAge)
	if len(cands) == 0 {
		o.faultMu.Unlock()
		return false
	}
	p := cands[rng.IntN(len(cands))]
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	id, err := o.q.RecordPause(qctx, chaosdb.RecordPauseParams{Instance: int32(p.instance), Pid: int32(p.pid)})
	cancel()
	if err != nil {
		o.faultMu.Unlock()
		return false // the database is away; pause another time
	}
	paused := o.fleet.pause(p)
	o.faultMu.Unlock()
	if paused {
		o.pauses.Add(1)
		sleep(ctx, 2*o.cfg.lease())
		o.fleet.resume(p)
	}
	// Recorded even if the process had exited before it could be stopped,
	// so that every pause row has an end.
	deadline := time.Now().Add(time.Minute)
	for {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		err := o.q.RecordResume(rctx, id)
		cancel()
		if err == nil {
			return paused
		}
		if time.Now().After(deadline) {
			o.problem("record the end of the pause of worker process %d: %v", p.instance, err)
			return paused
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// terminateLoop ends a pgtask worker session now and then: every other
// time one whose handler is running, if there is one, else a random one
// (idle in the pool, claiming, recording, listening or in a job).
func (o *orchestrator) terminateLoop(ctx context.Context, rng *rand.Rand) {
	for n := 0; ; n++ {
		sleep(ctx, jittered(rng, o.cfg.TerminateEvery))
		if ctx.Err() != nil {
			return
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		o.terminateOne(qctx, rng, n%2 == 1)
		cancel()
	}
}

func (o *orchestrator) terminateOne(ctx context.Context, rng *rand.Rand, midHandler bool) {
	// A paused process keeps its sessions, as a hung one would: with all
	// of them cut, it could not reconnect, and would be taken for dead.
	// faultMu keeps a pause from starting meanwhile.
	o.faultMu.Lock()
	defer o.faultMu.Unlock()
	spared := o.fleet.pausedNames()
	backends, err := o.q.WorkerBackends(ctx, spared)
	if err != nil || len(backends) == 0 {
		return
	}
	// Nor is a process's last session cut: a live process with no session
	// left looks dead, and its running jobs are rescued while their
	// handlers go on (the documented limit of a network partition, which
	// this fault is not), which long held-mode attempts would meet.
	perProcess := map[string]int{}
	for _, b := range backends {
		perProcess[b.ApplicationName]++
	}
	backends = slices.DeleteFunc(backends, func(b chaosdb.WorkerBackendsRow) bool { return perProcess[b.ApplicationName] < 2 })
	if len(backends) == 0 {
		return
	}
	busy, err := o.q.BusyWorkerBackends(ctx, spared)
	if err != nil {
		return
	}
	busy = slices.DeleteFunc(busy, func(pid int32) bool {
		return !slices.ContainsFunc(backends, func(b chaosdb.WorkerBackendsRow) bool { return b.Pid == pid })
	})
	pick := backends[rng.IntN(len(backends))]
	if midHandler && len(busy) > 0 {
		pid := busy[rng.IntN(len(busy))]
		for _, b := range backends {
			if b.Pid == pid {
				pick = b
			}
		}
	}
	ok, err := o.q.TerminateBackend(ctx, pick.Pid)
	if err != nil || !ok {
		return
	}
	o.terminations.Add(1)
	if pick.State == "idle in transaction" || pick.State == "active" {
		o.terminatedJob.Add(1)
	}
	if slices.Contains(busy, pick.Pid) {
		o.terminatedMid.Add(1)
	}
}

// databaseFaults restarts the database once restartAt of the jobs have
// finished and crashes it at crashAt. The restart first waits, up to
// longWaitMax, for an attempt of a long job to be running in a lease-mode
// process, so that it lands inside that attempt's work. Each is recorded in
// pgtask_chaos.db_faults: just before, and once the server answers again.
func (o *orchestrator) databaseFaults(ctx context.Context) {
	type fault struct {
		on    bool
		at    float64
		name  string
		do    func(context.Context) error
		count *atomic.Int64
	}
	for _, f := range []fault{
		{o.cfg.RestartDB, restartAt, "restart", o.cluster.Restart, &o.restarts},
		{o.cfg.CrashDB, crashAt, "crash", o.cluster.Crash, &o.crashes},
	} {
		if !f.on {
			continue
		}
		for {
			if ctx.Err() != nil {
				return
			}
			// Not within dbFaultGap of the previous one, which the long
			// attempt the restart landed in should meet alone.
			if o.finishedShare() >= f.at && time.Since(time.Unix(0, o.dbFaultEnded.Load())) >= dbFaultGap {
				break
			}
			sleep(ctx, 100*time.Millisecond)
		}
		if !o.databaseFault(ctx, f.name, f.do) {
			return
		}
		f.count.Add(1)
	}
}

// databaseFault carries out one database fault, with no process paused,
// and reports whether it did.
func (o *orchestrator) databaseFault(ctx context.Context, name string, do func(context.Context) error) bool {
	o.pauseGate.Lock()
	defer o.pauseGate.Unlock()
	defer func() { o.dbFaultEnded.Store(time.Now().UnixNano()) }()
	spare := 0
	if name == "restart" {
		spare = o.awaitLongAttempt(ctx)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	id, err := o.q.RecordDBFault(rctx, name)
	cancel()
	if err != nil {
		o.problem("record the database %s: %v", name, err)
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	began := time.Now()
	err = do(fctx)
	cancel()
	if err != nil {
		o.problem("database %s: %v", name, err)
		return false
	}
	if id != 0 {
		o.endDBFault(ctx, id, name)
	}
	away := time.Since(began)
	if spare != 0 {
		// Its work ends within longWork+longJitter; then its end is
		// recorded and its success settled.
		o.fleet.spare(spare, time.Now().Add(longWork+longJitter+5*time.Second))
	}
	o.mu.Lock()
	o.dbAway[name] = away
	o.mu.Unlock()
	o.printf("%7.1fs  database %s done (away %.1fs)\n", time.Since(o.began).Seconds(), name, away.Seconds())
	return true
}

// longWaitMax bounds how long the restart waits for a long attempt;
// dbFaultGap is the least time between the restart and the crash.
const (
	longWaitMax = 20 * time.Second
	dbFaultGap  = longWork + longJitter
)

// awaitLongAttempt waits, up to longWaitMax, until an attempt of a long
// job that started in the last 2 seconds (so that at least 4 seconds of
// its work are left) is running in a live lease-mode process that is not
// paused, with no lease-mode process killed meanwhile. It returns that
// process's instance, which is then spared from kills and pauses until
// after the restart and that attempt's work, or 0.
func (o *orchestrator) awaitLongAttempt(ctx context.Context) int {
	if o.cfg.Long == 0 || o.fleet.leaseSlots() == 0 {
		return 0
	}
	// Meanwhile no lease-mode process is killed: each new one takes a
	// while to start and claim.
	o.fleet.spareLease.Store(true)
	defer o.fleet.spareLease.Store(false)
	began := time.Now()
	found := 0
	var landed *chaosdb.LongAttemptsRunningRow
	for found == 0 && ctx.Err() == nil && time.Since(began) < longWaitMax {
		// Under faultMu, so that no process is killed or paused between
		// the look and the sparing.
		o.faultMu.Lock()
		var instances []int32
		for _, p := range o.fleet.leaseProcs(0) {
			instances = append(instances, int32(p.instance))
		}
		if len(instances) > 0 {
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			running, err := o.q.LongAttemptsRunning(qctx, chaosdb.LongAttemptsRunningParams{
				Instances: instances, LongAttempts: longAttempts, WithinSecs: 2,
			})
			cancel()
			if err == nil && len(running) > 0 {
				landed = &running[0]
				found = int(landed.Instance)
				// Spared through the restart; the caller extends it after.
				o.fleet.spare(found, time.Now().Add(time.Minute))
			}
		}
		o.faultMu.Unlock()
		if found == 0 {
			sleep(ctx, 100*time.Millisecond)
		}
	}
	waited := time.Since(began)
	o.mu.Lock()
	o.longWait, o.longFound = waited, landed
	o.mu.Unlock()
	if found != 0 {
		o.printf("%7.1fs  long job %d attempt %d runs in lease-mode worker process %d (waited %.1fs): restarting the database\n",
			time.Since(o.began).Seconds(), landed.JobID, landed.Attempt, found, waited.Seconds())
	} else {
		o.printf("%7.1fs  no long job ran in a lease-mode process within %s: restarting the database\n", time.Since(o.began).Seconds(), longWaitMax)
	}
	return found
}

// endDBFault records that the server answers again, trying for a minute:
// the first tries may get connections of the old server from the pool.
func (o *orchestrator) endDBFault(ctx context.Context, id int64, name string) {
	deadline := time.Now().Add(time.Minute)
	for {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		err := o.q.EndDBFault(rctx, id)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			o.problem("record the end of the database %s: %v", name, err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// horizonPin is what pinHorizon reports.
type horizonPin struct {
	opens   atomic.Int64 // transactions opened
	held    atomic.Int64 // nanoseconds the ended ones were held, each until last seen open
	longest atomic.Int64 // nanoseconds, the longest one
	since   atomic.Int64 // when the open one was opened (UnixNano); 0 if none is
	maxLag  atomic.Int64 // the most transaction ids handed out behind one
}

// heldFor is how long transactions were held so far, the open one included.
func (h *horizonPin) heldFor() time.Duration {
	d := time.Duration(h.held.Load())
	if s := h.since.Load(); s != 0 {
		d += time.Since(time.Unix(0, s))
	}
	return d
}

// pinHorizon keeps a transaction with a transaction id open until ctx
// ends, on a connection of its own, and opens another whenever it is lost
// (the database restarted or crashed).
func (o *orchestrator) pinHorizon(ctx context.Context) {
	cc, err := pgx.ParseConfig(o.url)
	if err != nil {
		o.problem("pin the vacuum horizon: %v", err)
		return
	}
	cc.RuntimeParams["application_name"] = "pgtask-chaos horizon"
	// Whatever the server's default, this session stays idle in its
	// transaction on purpose.
	cc.RuntimeParams["idle_in_transaction_session_timeout"] = "0"
	for ctx.Err() == nil {
		o.holdHorizon(ctx, cc)
		sleep(ctx, 100*time.Millisecond)
	}
}

// holdHorizon opens one pinning transaction and holds it until ctx ends
// or the transaction is lost. It checks every 250ms that it is still open.
func (o *orchestrator) holdHorizon(ctx context.Context, cc *pgx.ConnConfig) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cc)
	if err != nil {
		return
	}
	defer conn.Close(context.Background()) //nolint:errcheck // ending the session ends the transaction
	tx, err := conn.Begin(cctx)
	if err != nil {
		return
	}
	q := chaosdb.New(tx)
	first, err := q.PinHorizon(cctx)
	if err != nil {
		return
	}
	pin := &o.pin
	opened := time.Now()
	pin.opens.Add(1)
	pin.since.Store(opened.UnixNano())
	last := opened
	defer func() {
		held := last.Sub(opened)
		pin.since.Store(0)
		pin.held.Add(int64(held))
		if int64(held) > pin.longest.Load() {
			pin.longest.Store(int64(held))
		}
	}()
	for {
		sleep(ctx, 250*time.Millisecond)
		if ctx.Err() != nil {
			// Open until now: it is rolled back here.
			last = time.Now()
			tx.Rollback(context.Background()) //nolint:errcheck // the session ends next
			return
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		r, err := q.PinHorizon(qctx)
		cancel()
		if err != nil || r.Xid != first.Xid {
			return
		}
		last = time.Now()
		if lag := r.NextXid - r.Xid; lag > pin.maxLag.Load() {
			pin.maxLag.Store(lag)
		}
	}
}
