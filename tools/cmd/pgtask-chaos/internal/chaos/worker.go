package chaos

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-chaos/internal/chaosdb"
)

// Timeouts of the kinds: chaos.slow's is short, so that its jobs time out;
// chaos.long's leaves its jobs' long work far inside it.
const (
	jobTimeout  = 10 * time.Second
	slowTimeout = 300 * time.Millisecond
	longTimeout = 60 * time.Second
)

// A long job's attempt works for longWork plus up to longJitter, about three
// times as long as the database's restart takes, before it touches
// job.Tx(). Only its first longAttempts attempts do: a kill, a terminated
// session (held mode) or a pause cuts most long attempts short, and a job
// whose every attempt took seconds could run out of attempts or outlast
// the run.
const (
	longWork     = 6 * time.Second
	longJitter   = 2 * time.Second
	longAttempts = 2
)

// A limited job's attempt works for limitedWork plus up to limitedJitter:
// longer than a held batch's commit budget, so that a held-mode runner's
// batches hold one of them each and a key's jobs run on several runners
// and processes at once; and long enough that a key's jobs queue up
// behind its limit while they run, so that their slots are handed on.
const (
	limitedWork   = 15 * time.Millisecond
	limitedJitter = 35 * time.Millisecond
)

// retryBackoff keeps retries quick: a failed job's group waits for them.
var retryBackoff = runtime.Backoff{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond}

// workerArgs are a worker process's settings, passed on its command line.
type workerArgs struct {
	url         string
	slot        int // which of the run's worker processes it replaces
	instance    int // unique within the run
	batch       int
	concurrency int
	mode        string        // runtime.ModeHeld or runtime.ModeLease
	lease       time.Duration // runtime.QueueConfig.Lease in lease mode; 0 for the runtime's default
}

func (a workerArgs) list() []string {
	return []string{"worker",
		"-url", a.url,
		"-slot", strconv.Itoa(a.slot),
		"-instance", strconv.Itoa(a.instance),
		"-batch", strconv.Itoa(a.batch),
		"-concurrency", strconv.Itoa(a.concurrency),
		"-mode", a.mode,
		"-lease", a.lease.String(),
	}
}

func mainWorker(args []string, stdout, stderr io.Writer) int {
	var a workerArgs
	fs := flag.NewFlagSet("pgtask-chaos worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&a.url, "url", "", "database URL")
	fs.IntVar(&a.slot, "slot", 0, "worker slot")
	fs.IntVar(&a.instance, "instance", 0, "worker process number, unique within the run")
	fs.IntVar(&a.batch, "batch", 0, "BatchSize of the chaos queue in held mode (0: the default; lease mode has none)")
	fs.IntVar(&a.concurrency, "concurrency", 2, "Concurrency of the chaos queue")
	fs.StringVar(&a.mode, "mode", string(runtime.ModeHeld), "mode of the chaos queue: held or lease")
	fs.DurationVar(&a.lease, "lease", 0, "runtime.QueueConfig.Lease in lease mode: how long a claim answers for its job (0: the runtime's default)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if a.url == "" {
		fmt.Fprintln(stderr, "pgtask-chaos worker: -url is required")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := runWorker(ctx, a, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "pgtask-chaos worker: %v\n", err)
		return 1
	}
	return 0
}

// runWorker runs a pgtask worker on the chaos queue until ctx ends. Its
// handlers record each attempt in pgtask_chaos.attempts through a pool of
// their own (autocommit) and write the job's effect through job.Tx().
func runWorker(ctx context.Context, a workerArgs, stdout, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pc, err := pgxpool.ParseConfig(a.url)
	if err != nil {
		return err
	}
	pc.ConnConfig.RuntimeParams["application_name"] = workerAppName(a.instance)
	// Each mode's settings go to a queue of that mode only.
	qc := runtime.QueueConfig{Concurrency: a.concurrency, Mode: runtime.Mode(a.mode)}
	if qc.Mode == runtime.ModeLease {
		qc.Lease = a.lease
	} else {
		qc.BatchSize = a.batch
	}
	w, err := startWorker(ctx, pc, runtime.Config{
		Queues:        map[string]runtime.QueueConfig{queueName: qc},
		Logger:        log,
		ShutdownGrace: 5 * time.Second,
	}, log)
	if err != nil {
		if ctx.Err() != nil {
			// Stopped before the worker could start: nothing ran, a clean stop.
			return nil
		}
		return err
	}
	defer w.Close()

	rc, err := pgxpool.ParseConfig(a.url)
	if err != nil {
		return err
	}
	rc.ConnConfig.RuntimeParams["application_name"] = "pgtask-chaos recorder"
	rc.MaxConns = int32(a.concurrency + 2)
	rec, err := pgxpool.NewWithConfig(ctx, rc)
	if err != nil {
		return err
	}
	defer rec.Close()

	h := &handler{args: a, rec: chaosdb.New(rec), pid: os.Getpid()}
	for _, r := range []runtime.Registration{
		{Kind: kindJob, Handler: h.handle, Timeout: jobTimeout, Backoff: retryBackoff},
		{Kind: kindLimited, Handler: h.handle, Timeout: jobTimeout, Backoff: retryBackoff},
		{Kind: kindSlow, Handler: h.handle, Timeout: slowTimeout, Backoff: retryBackoff},
		{Kind: kindPoison, Handler: h.handle, Timeout: jobTimeout, Backoff: retryBackoff},
		{Kind: kindLong, Handler: h.handle, Timeout: longTimeout, Backoff: retryBackoff},
		{Kind: kindCallback, Handler: h.handle, Timeout: jobTimeout, Backoff: retryBackoff},
	} {
		if err := w.Register(r); err != nil {
			return err
		}
	}

	printRSS := func(when string) {
		fmt.Fprintf(stdout, "pgtask-chaos worker %d (slot %d, pid %d, %s mode, batch %d, concurrency %d): rss %s %s\n",
			a.instance, a.slot, h.pid, a.mode, a.batch, a.concurrency, formatKiB(rssKiB(h.pid)), when)
	}
	printRSS("at start")
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				printRSS("")
			}
		}
	}()
	err = w.Run(ctx)
	close(done)
	printRSS("at exit")
	return err
}

// workerAppName is the application_name of a worker process's pgtask
// sessions, by which the run finds them (WorkerBackends).
func workerAppName(instance int) string {
	return "pgtask worker " + strconv.Itoa(instance)
}

type handler struct {
	args     workerArgs
	rec      *chaosdb.Queries
	pid      int
	attempts atomic.Int64 // numbers this process's attempt records
}

// errStartNotRecorded fails an attempt whose start could not be written
// (the database was away); the checks accept it in place of a start row.
var errStartNotRecorded = errors.New("chaos: start not recorded")

// handle runs one attempt of a chaos job: it records its start, writes the
// job's effect through job.Tx() (a batch's callback also what it was
// released with), works a little, then does what the payload says for this
// attempt, and records how it ended.
func (h *handler) handle(ctx context.Context, job *runtime.Job) error {
	p, err := runtime.DecodePayload[payload](job)
	if err != nil {
		return err
	}
	if p.Behavior == behaveLong {
		return h.handleLong(ctx, job)
	}
	conn := job.Tx().Conn()
	if conn == nil {
		// Lease mode: the job's transaction begins here, and could not
		// (the database was away).
		return fmt.Errorf("%w: the job's transaction could not begin", errStartNotRecorded)
	}
	backend := conn.PgConn().PID()
	id, err := h.start(ctx, job, backend)
	if err != nil {
		return fmt.Errorf("%w: %w", errStartNotRecorded, err)
	}
	outcome := "ok"
	defer func() {
		if v := recover(); v != nil {
			h.end(id, "panic")
			panic(v)
		}
		h.end(id, outcome)
	}()

	if p.Behavior == behavePoison {
		h.die()
	}
	err = chaosdb.New(job.Tx()).InsertEffect(ctx, chaosdb.InsertEffectParams{
		JobID: int64(job.ID), Attempt: int32(job.Attempt), Instance: int32(h.args.instance),
	})
	if err != nil {
		outcome = "effect_error"
		return fmt.Errorf("chaos: write effect: %w", err)
	}
	if p.Callback != "" {
		if err := h.recordCallback(ctx, job); err != nil {
			outcome = "effect_error"
			return err
		}
	}
	// A little work, now and then more, so that kills and terminations
	// land inside handlers too.
	work := time.Duration(rand.IntN(2000)) * time.Microsecond
	if rand.IntN(20) == 0 {
		work = 20 * time.Millisecond
	}
	if p.Limited {
		work = limitedWork + rand.N(limitedJitter)
	}
	sleep(ctx, work)

	switch {
	case p.Behavior == behaveFail && job.Attempt == 1,
		p.Behavior == behaveFail2 && job.Attempt <= 2:
		outcome = "error"
		return fmt.Errorf("chaos: injected failure on attempt %d", job.Attempt)
	case p.Behavior == behavePanic && job.Attempt == 1:
		panic(fmt.Sprintf("chaos: injected panic on attempt %d", job.Attempt))
	case p.Behavior == behaveTimeout && job.Attempt == 1:
		<-ctx.Done()
		outcome = "timeout"
		return ctx.Err()
	case p.Behavior == behaveNoRetry:
		outcome = "noretry"
		return runtime.NoRetry(errors.New("chaos: injected final failure"))
	case p.Behavior == behaveExhaust:
		outcome = "error"
		return fmt.Errorf("chaos: injected failure on every attempt (this is %d of %d)", job.Attempt, job.MaxAttempts)
	}
	if ctx.Err() != nil {
		// Cut short (shutdown, or a timeout that came first).
		outcome = "cancelled"
		return ctx.Err()
	}
	return nil
}

// recordCallback writes, through the job's transaction, what a batch's
// callback was released with (its runtime.BatchSummary): it commits only
// with the attempt's success, so check 11 counts the callback's runs.
func (h *handler) recordCallback(ctx context.Context, job *runtime.Job) error {
	s, err := runtime.BatchSummaryOf(job)
	if err != nil {
		// Released by no batch: check 11 finds the callback never ran.
		return runtime.NoRetry(fmt.Errorf("chaos: callback: %w", err))
	}
	err = chaosdb.New(job.Tx()).RecordCallbackRun(ctx, chaosdb.RecordCallbackRunParams{
		JobID: int64(job.ID), Attempt: int32(job.Attempt), BatchID: int64(s.BatchID), Finished: s.Finished,
		Total: int32(s.Total), Succeeded: int32(s.Succeeded), Failed: int32(s.Failed),
		Cancelled: int32(s.Cancelled), Deleted: int32(s.Deleted),
	})
	if err != nil {
		return fmt.Errorf("chaos: record the callback's run: %w", err)
	}
	return nil
}

// handleLong runs an attempt of a long job. It records its start with no
// backend (its job's transaction has not begun), works for a long while
// without touching job.Tx(), so that in lease mode no transaction is open
// while it works (in held mode the job's transaction is open throughout,
// as always), then writes the job's effect through job.Tx() and succeeds.
// The restart of the database is meant to land inside that work: in lease
// mode the handler goes on and its success is recorded afterwards; in held
// mode the attempt's session is gone, its write fails and it is retried.
func (h *handler) handleLong(ctx context.Context, job *runtime.Job) error {
	id, err := h.start(ctx, job, 0)
	if err != nil {
		return fmt.Errorf("%w: %w", errStartNotRecorded, err)
	}
	outcome := "ok"
	defer func() { h.end(id, outcome) }()
	work := time.Duration(rand.IntN(2000)) * time.Microsecond
	if job.Attempt <= longAttempts {
		work = longWork + rand.N(longJitter)
	}
	sleep(ctx, work)
	if ctx.Err() != nil {
		// The lease was lost to a takeover, or the worker is shutting down.
		outcome = "cancelled"
		return ctx.Err()
	}
	err = chaosdb.New(job.Tx()).InsertEffect(ctx, chaosdb.InsertEffectParams{
		JobID: int64(job.ID), Attempt: int32(job.Attempt), Instance: int32(h.args.instance),
	})
	if err != nil {
		outcome = "effect_error"
		return fmt.Errorf("chaos: write effect: %w", err)
	}
	return nil
}

// start records the attempt's start, retrying for a few seconds: the
// database may be restarting, and a pooled connection may be stale.
func (h *handler) start(ctx context.Context, job *runtime.Job, backend uint32) (int64, error) {
	id := int64(h.args.instance)<<32 | h.attempts.Add(1)
	deadline := time.Now().Add(3 * time.Second)
	for {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := h.rec.StartAttempt(qctx, chaosdb.StartAttemptParams{
			ID: id, JobID: int64(job.ID), Attempt: int32(job.Attempt), GroupKey: job.Group,
			Instance: int32(h.args.instance), WorkerPid: int32(h.pid), Mode: h.args.mode, BackendPid: int32(backend),
		})
		cancel()
		if err == nil {
			return id, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return 0, err
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// end records how the attempt ended. It keeps trying for half a minute: an
// attempt without an end counts as cut off by its process's death.
func (h *handler) end(id int64, outcome string) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := h.rec.EndAttempt(ctx, chaosdb.EndAttemptParams{ID: id, Outcome: outcome})
		cancel()
		if err == nil || time.Now().After(deadline) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// die records this process's death and SIGKILLs it.
func (h *handler) die() {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := h.rec.RecordDeath(ctx, chaosdb.RecordDeathParams{Instance: int32(h.args.instance), Pid: int32(h.pid), Kind: "poison"})
		cancel()
		if err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	syscall.Kill(h.pid, syscall.SIGKILL) //nolint:errcheck // it does not return
	select {}
}

// rssKiB reads a process's resident set size from /proc; 0 if it cannot.
func rssKiB(pid int) int64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

func formatKiB(kib int64) string {
	return fmt.Sprintf("%.1f MiB", float64(kib)/1024)
}

// startWorker creates the worker as a process supervisor would: NewWorker
// fails at once when the database cannot be reached (it is restarting, or
// the run terminated the checking session), so the process tries again for
// a while, as a restart policy would restart it. A schema or capacity
// error is final.
func startWorker(ctx context.Context, pc *pgxpool.Config, cfg runtime.Config, log *slog.Logger) (*runtime.Worker, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		w, err := runtime.NewWorker(ctx, pc, cfg)
		if err == nil || errors.Is(err, runtime.ErrSchemaNotCurrent) || errors.Is(err, runtime.ErrNotEnoughConnections) ||
			ctx.Err() != nil || time.Now().After(deadline) {
			return w, err
		}
		log.Warn("chaos worker: could not start; trying again", "error", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
