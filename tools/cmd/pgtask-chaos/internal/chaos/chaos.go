// Package chaos is pgtask-chaos: it runs pgtask workers in separate processes
// against a throwaway PostgreSQL cluster, enqueues jobs while it kills
// workers, terminates their sessions, restarts and crashes the database and
// lets handlers fail, panic, time out or kill their own process, then checks
// from the database that pgtask kept its guarantees.
//
// It also pauses lease-mode workers past their lease, keeps a transaction
// open beside them for the whole run, and runs long jobs across the
// database's restart.
//
// One binary plays two roles: Run (the orchestrator, `pgtask-chaos run`)
// starts worker processes by running its own executable again as
// `pgtask-chaos worker`.
package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Config is one run.
type Config struct {
	// Workers is how many worker processes run at once. Held-mode ones
	// take turns between the default BatchSize, 1 and 8, and have
	// concurrency 2 to 4; every third runs in lease mode.
	Workers int
	// Jobs is how many jobs the producer commits, grouped and ungrouped:
	// one transaction in twenty a workflow, one in thirty-three a batch
	// with callbacks (which come on top).
	Jobs int
	// Groups is how many FIFO groups the grouped jobs spread over.
	Groups int
	// Ungrouped is how many of Jobs have no group.
	Ungrouped int
	// Limited is how many of the Ungrouped jobs have a concurrency limit:
	// in turn, of key "key-a" (limit 2), "key-b" (limit 3) and the chaos
	// queue's own limit (4). A producer of their own enqueues them in
	// bursts spread over ProduceOver.
	Limited int
	// Tenants, when above 0, makes the chaos queue fair (docs/fairness.md):
	// the jobs take turns among that many tenants, a group's jobs spread
	// over all of them, and the rolled-back ones name none (tenant "").
	Tenants int
	// Poison is how many jobs kill their own worker process on every
	// attempt (max_attempts 3).
	Poison int
	// Seed makes the job mix, the producer's choices and the fault targets
	// repeatable (timing is not). Zero picks one from the clock.
	Seed int64
	// Timeout bounds the run; one that does not finish in time fails.
	Timeout time.Duration
	// ProduceOver spreads the producer's enqueues over this long, so that
	// enqueueing and working overlap; zero enqueues as fast as it can.
	ProduceOver time.Duration
	// KillEvery is the mean time between SIGKILLs of a random worker
	// process; zero kills none. Worker 0 is spared while there are others,
	// so that one process's memory can be watched over the whole run.
	KillEvery time.Duration
	// TerminateEvery is the mean time between pg_terminate_backend calls on
	// pgtask worker sessions, every other one on a session whose handler is
	// running; zero terminates none.
	TerminateEvery time.Duration
	// RestartDB restarts the database (fast shutdown) once 30% of the jobs
	// have finished; CrashDB crashes it (SIGKILL, crash recovery) at 60%.
	// The restart first waits (up to 20s) for a long job's attempt to be
	// running in a lease-mode worker process.
	RestartDB bool
	CrashDB   bool
	// Long is how many of the Ungrouped jobs are long: on its first two
	// attempts the handler works for 6 to 8 seconds, about three times a
	// restart of the database, before it writes its effect through
	// job.Tx(). They are enqueued one at a time as the run's finished jobs
	// pass marks spread from 25% to 70%, so that they run around the restart
	// and the crash.
	Long int
	// Lease is the lease of lease-mode worker processes
	// (runtime.QueueConfig.Lease); zero is the runtime's default, 30s.
	Lease time.Duration
	// PauseEvery is the mean time between pauses of a lease-mode worker
	// process: it is stopped (SIGSTOP) for twice its lease, so that other
	// workers take its jobs over, then continued (SIGCONT), when its late
	// outcomes must be refused. Zero pauses none.
	PauseEvery time.Duration
	// PinHorizon keeps a transaction that has a transaction id open beside
	// the workers for the whole run, opened again whenever the database
	// ends it (restart, crash). It holds back the vacuum horizon of the
	// whole cluster, as a long report or a forgotten session would.
	PinHorizon bool
	// Progress is how often a progress line is printed.
	Progress time.Duration
	// RSSMinLife is how long a worker process must have lived for its
	// memory growth to be judged.
	RSSMinLife time.Duration
	// LogDir receives one log file per worker process. Empty: a new
	// temporary directory, kept after the run.
	LogDir string
	// Exe is the program started as a worker process with the arguments
	// "worker ..."; default os.Args[0], this program. Env is added to its
	// environment.
	Exe string
	Env []string
	// Out receives the progress lines; default os.Stdout.
	Out io.Writer
	// Inspect, if set, is called with the result and the database's URL
	// after the checks and before the cluster goes away.
	Inspect func(res *Result, url string)
}

// DefaultConfig is the full run.
func DefaultConfig() Config {
	return Config{
		Workers:        4,
		Jobs:           50_000,
		Groups:         1_000,
		Ungrouped:      2_500,
		Limited:        1_200,
		Poison:         5,
		Timeout:        10 * time.Minute,
		ProduceOver:    40 * time.Second,
		KillEvery:      3 * time.Second,
		TerminateEvery: 300 * time.Millisecond,
		RestartDB:      true,
		CrashDB:        true,
		Long:           100,
		Lease:          10 * time.Second,
		PauseEvery:     45 * time.Second,
		PinHorizon:     true,
		Progress:       5 * time.Second,
		RSSMinLife:     30 * time.Second,
	}
}

// defaultLong is the number of long jobs for a run of jobs jobs: 0.2%, at
// least 4, at most the ungrouped ones.
func defaultLong(jobs, ungrouped int) int {
	return min(max(4, jobs/500), ungrouped)
}

// lease is the lease of lease-mode worker processes: Lease, or the
// runtime's default.
func (c Config) lease() time.Duration {
	if c.Lease > 0 {
		return c.Lease
	}
	return 30 * time.Second
}

func (c Config) validate() error {
	switch {
	case c.Workers < 1:
		return errors.New("-workers must be at least 1")
	case c.Jobs < 1:
		return errors.New("-jobs must be at least 1")
	case c.Ungrouped < 0 || c.Ungrouped > c.Jobs:
		return errors.New("-ungrouped must be between 0 and -jobs")
	case c.Groups < 1 && c.Ungrouped < c.Jobs:
		return errors.New("-groups must be at least 1 when there are grouped jobs")
	case c.Groups > c.Jobs-c.Ungrouped:
		return fmt.Errorf("-groups %d is more than the %d grouped jobs", c.Groups, c.Jobs-c.Ungrouped)
	case c.Poison < 0 || c.Poison > c.Jobs-c.Ungrouped:
		return errors.New("-poison must be between 0 and the number of grouped jobs")
	case c.Long < 0 || c.Long > c.Ungrouped:
		return errors.New("-long must be between 0 and -ungrouped")
	case c.Limited < 0 || c.Long+c.Limited > c.Ungrouped:
		return errors.New("-limited must be between 0 and -ungrouped less -long")
	case c.Long > c.Jobs/4:
		// Their marks go up to 70% of the jobs finished, which the others
		// must reach on their own.
		return errors.New("-long must be at most a quarter of -jobs")
	case c.Lease < 0:
		return errors.New("-lease must not be negative")
	case c.Timeout <= 0:
		return errors.New("-timeout must be positive")
	}
	return nil
}

// Main runs the command line args (without the program name) and returns
// the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "run":
		return mainRun(args[1:], stdout, stderr)
	case "worker":
		return mainWorker(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "pgtask-chaos: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  pgtask-chaos run [flags]     run pgtask under faults and check its guarantees
  pgtask-chaos worker [flags]  a worker process (started by run)

Run "pgtask-chaos run -h" for the run's flags.
`)
}

func mainRun(args []string, stdout, stderr io.Writer) int {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("pgtask-chaos run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "worker processes running at once")
	fs.IntVar(&cfg.Jobs, "jobs", cfg.Jobs, "jobs to commit, grouped and ungrouped")
	fs.IntVar(&cfg.Groups, "groups", cfg.Groups, "FIFO groups the grouped jobs spread over")
	fs.IntVar(&cfg.Ungrouped, "ungrouped", cfg.Ungrouped, "how many of the jobs have no group")
	fs.IntVar(&cfg.Limited, "limited", cfg.Limited, "how many of the ungrouped jobs have a concurrency limit (keys of limits 2, 3 and the queue's own 4)")
	fs.IntVar(&cfg.Tenants, "tenants", cfg.Tenants, "tenants the jobs take turns among in a fair chaos queue (0: the queue is not fair)")
	fs.IntVar(&cfg.Poison, "poison", cfg.Poison, "jobs that kill their own worker process on every attempt")
	fs.Int64Var(&cfg.Seed, "seed", 0, "random seed (0: from the clock)")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "the run fails if it has not finished by then")
	fs.DurationVar(&cfg.Timeout, "duration", cfg.Timeout, "same as -timeout")
	fs.DurationVar(&cfg.ProduceOver, "produce-over", cfg.ProduceOver, "spread the enqueues over this long (0: as fast as possible)")
	fs.DurationVar(&cfg.KillEvery, "kill-every", cfg.KillEvery, "mean time between SIGKILLs of a worker process (0: none)")
	fs.DurationVar(&cfg.TerminateEvery, "terminate-every", cfg.TerminateEvery, "mean time between pg_terminate_backend calls on worker sessions (0: none)")
	fs.BoolVar(&cfg.RestartDB, "restart-db", cfg.RestartDB, "restart the database once 30% of the jobs finished")
	fs.BoolVar(&cfg.CrashDB, "crash-db", cfg.CrashDB, "crash the database (SIGKILL) once 60% of the jobs finished")
	long := fs.Int("long", -1, "ungrouped jobs that work 6-8s, enqueued around the restart (-1: 0.2% of -jobs, at least 4)")
	fs.DurationVar(&cfg.Lease, "lease", cfg.Lease, "lease of the lease-mode worker processes (runtime.QueueConfig.Lease; 0: the runtime's default)")
	fs.DurationVar(&cfg.PauseEvery, "pause-every", cfg.PauseEvery, "mean time between pauses (SIGSTOP for twice the lease) of a lease-mode worker process (0: none)")
	fs.BoolVar(&cfg.PinHorizon, "pin-horizon", cfg.PinHorizon, "keep a transaction with an xid open beside the workers for the whole run")
	fs.DurationVar(&cfg.Progress, "progress", cfg.Progress, "interval between progress lines")
	fs.DurationVar(&cfg.RSSMinLife, "rss-min-life", cfg.RSSMinLife, "judge memory growth of worker processes that lived at least this long")
	fs.StringVar(&cfg.LogDir, "log-dir", "", "directory for the worker processes' logs (default: a new temporary directory)")
	keep := fs.Bool("keep-db", false, "after the summary, keep the database running for inspection until interrupted")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "pgtask-chaos run: unexpected arguments %q\n", fs.Args())
		return 2
	}
	cfg.Long = *long
	if cfg.Long < 0 {
		cfg.Long = defaultLong(cfg.Jobs, cfg.Ungrouped)
	}
	cfg.Out = stdout

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	printed := false
	if *keep {
		cfg.Inspect = func(res *Result, url string) {
			res.Print(stdout)
			printed = true
			fmt.Fprintf(stdout, "\ndatabase kept for inspection: psql '%s' (interrupt to end)\n", url)
			<-ctx.Done()
		}
	}
	res, err := Run(ctx, cfg)
	if res != nil && !printed {
		res.Print(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "pgtask-chaos: %v\n", err)
		return 1
	}
	if !res.OK() {
		return 1
	}
	return 0
}
