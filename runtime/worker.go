package runtime

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/gen"
)

// Handler runs one job. Returning nil succeeds the job; an error fails the
// attempt (see NoRetry and RetryAfter); a panic is recovered and fails it too.
//
// Handlers run on goroutines the worker keeps and reuses for later jobs, as
// a net/http server runs a connection's requests one after another on one
// goroutine. A handler that changes its goroutine must undo the change
// before it returns: unlock an OS thread it locked (runtime.LockOSThread),
// restore debug.SetPanicOnFault. Profiler labels are reset after each job
// to those Run was called with.
type Handler func(ctx context.Context, job *Job) error

// Registration ties a kind to its handler and the handler's limits.
type Registration struct {
	Kind string
	// Queue is where the kind's jobs go unless enqueued elsewhere (generated
	// handlers set it from the task's tag). A worker that does not serve it
	// says so when it starts. Empty: no such check.
	Queue   string
	Handler Handler
	// Timeout bounds one attempt; its context is cancelled then. Default:
	// Config.DefaultTimeout.
	Timeout time.Duration
	// Backoff spaces retries. Zero value: DefaultBackoff().
	Backoff Backoff
	// Mode is the mode the kind's handler needs (generated handlers set it
	// from the task's tag), or empty for either. A queue whose
	// QueueConfig.Mode is unset takes its kinds' mode; Register refuses a
	// kind whose mode disagrees with the queue's configured mode or its
	// other kinds', or whose mode its queue's settings do not apply to
	// (BatchSize or CommitBudget in lease mode).
	Mode Mode
	// HasResult says the kind's jobs return results (generated handlers of
	// TaskWithResult tasks set it): workers then announce each one's finish,
	// success or failure, to those waiting for it (WaitJobs).
	HasResult bool
	// MaxSnoozes caps how often one of the kind's jobs may snooze (see
	// Snooze): the snooze past it fails the job for good. Zero:
	// DefaultMaxSnoozes. Generated handlers set it from the task's
	// max_snoozes option.
	MaxSnoozes int
}

// DefaultMaxSnoozes is how often a job may snooze when its kind sets no
// cap (Registration.MaxSnoozes): enough for a job waiting on something
// outside it, checked every minute, to wait for more than an hour and a
// half, yet not for ever.
const DefaultMaxSnoozes = 100

// Mode is how a worker runs a queue's jobs.
type Mode string

const (
	// ModeHeld runs each job inside a transaction that holds the job's row
	// lock for the whole attempt, on a connection of its own. The handler's
	// writes commit with the success; a worker that dies lets its jobs go
	// within about a second. Each running job holds a connection and keeps
	// a transaction open, so jobs should be short. The default.
	ModeHeld Mode = "held"
	// ModeLease claims jobs with a lease (QueueConfig.Lease) that a heartbeat
	// extends while the handler runs. Handlers hold no connection (unless
	// they use Job.Tx), so thousands can run on a few connections, and jobs
	// may run for hours and outlive a database restart. A worker that dies
	// lets its jobs go at once; one that hangs, when their leases run out,
	// and its late outcomes are then refused.
	ModeLease Mode = "lease"
)

// check refuses a mode that is neither empty nor one of the two.
func (m Mode) check() error {
	if m != "" && m != ModeHeld && m != ModeLease {
		return fmt.Errorf("unknown mode %q (want %q or %q)", m, ModeHeld, ModeLease)
	}
	return nil
}

// The defaults of a held-mode queue's batches (QueueConfig.BatchSize and
// QueueConfig.CommitBudget).
const (
	DefaultBatchSize    = 100
	DefaultCommitBudget = 10 * time.Millisecond
)

// QueueConfig says how a worker serves one queue. The queue is where its
// mode is chosen; the settings of one mode only (BatchSize, CommitBudget, Lease) are an
// error from NewWorker or Register on a queue that runs in the other.
type QueueConfig struct {
	// Mode runs the queue's jobs in held or lease mode. Empty: the mode its
	// registered kinds declare (the task's mode= tag, Registration.Mode),
	// else ModeHeld. A kind that declares the other mode is an error from
	// Register.
	Mode Mode
	// Concurrency is the most of the queue's handlers that run at once, in
	// either mode. In held mode each one runs on a runner that holds a
	// database connection while its batch runs, out of the worker's
	// Config.MaxConns, which its held-mode queues share; default 10. In
	// lease mode it also bounds the jobs the queue has claimed, whose
	// handlers hold no connection; default 100.
	Concurrency int
	// BatchSize, held mode only, is the most jobs one claim of a runner
	// takes: runnable heads, and behind a grouped head the run of its
	// group's next queued jobs. A batch's jobs run one after another in one
	// transaction, each rolled back alone if it fails, and their successes
	// commit together: far fewer round trips and commits for short jobs.
	// Within this cap a runner claims as many jobs as it expects to run
	// within CommitBudget, judging by how long the queue's handlers took so
	// far, and commits before that budget runs out (see CommitBudget). So a
	// lone job commits at once, a backlog of short jobs shares commits, and
	// a job expected to take longer than the budget does not keep the jobs
	// behind it in its batch waiting: they are handed back for other
	// runners. Default DefaultBatchSize; 1 runs
	// and commits each job on its own. (Lease mode claims as many jobs as
	// Concurrency has room for, runnable heads first and then runs of up to
	// 10 jobs behind them.)
	BatchSize int
	// CommitBudget, held mode only, bounds how long a batch's finished
	// jobs may wait for their commit while the batch goes on: a runner
	// commits what has run before starting a job it expects to take it past
	// the budget (a kind it has seen run fewer than 8 times is expected
	// to), and the
	// jobs still claimed go on in the next transaction, without a new claim.
	// A handler slower than its kind has been so far can still hold back the
	// commit of the jobs before it in its batch by its own excess. Default
	// DefaultCommitBudget.
	CommitBudget time.Duration
	// Lease, lease mode only, is how long a claim answers for its job: the
	// heartbeat extends it every third of it, and a job whose lease ran out
	// is taken over by another worker. Default 30s; at least 1s. Setting
	// it needs Mode set to ModeLease.
	Lease time.Duration
}

// checkModeSettings refuses a setting of queue name's configuration that
// applies to the mode it does not run in; by says what decided its mode
// ("queue emails runs", "kind k runs the queue"). An empty mode is held.
func checkModeSettings(name string, qc QueueConfig, mode Mode, by string) error {
	if mode == ModeLease && qc.BatchSize != 0 {
		return fmt.Errorf("queue %s: BatchSize applies to held mode only; %s in lease mode", name, by)
	}
	if mode == ModeLease && qc.CommitBudget != 0 {
		return fmt.Errorf("queue %s: CommitBudget applies to held mode only; %s in lease mode", name, by)
	}
	if mode != ModeLease && qc.Lease != 0 {
		if qc.Mode == "" {
			return fmt.Errorf("queue %s: Lease applies to lease mode only; set the queue's Mode to ModeLease", name)
		}
		return fmt.Errorf("queue %s: Lease applies to lease mode only; %s in held mode", name, by)
	}
	if mode == ModeLease && qc.Lease != 0 && qc.Lease < minLease {
		return fmt.Errorf("queue %s: Lease %s is shorter than %s: the lease would run out before its heartbeat (every third of it) could extend it", name, qc.Lease, minLease)
	}
	return nil
}

// Config configures a Worker. The zero value serves the default queue with
// ten concurrent jobs.
type Config struct {
	Queues map[string]QueueConfig
	Logger *slog.Logger // default slog.Default()
	// DefaultTimeout bounds an attempt of a kind registered without a
	// Timeout. Default 1 minute.
	DefaultTimeout time.Duration
	// PollInterval is how often an idle worker looks for jobs when no
	// notification came. Default 1s. Values near the largest time.Duration
	// count as about 146 years.
	PollInterval time.Duration
	// MaintenanceInterval is how often the worker moves due scheduled jobs to
	// their queue and requeues jobs of dead workers. Default 250ms; at most
	// about two days (longer counts as that), as a leader's term, three of
	// its elections every fourth round, must fit what the database keeps.
	MaintenanceInterval time.Duration
	// ShutdownGrace is how long running jobs may go on after Run's context
	// is cancelled before their contexts are cancelled too. Default 10s.
	ShutdownGrace time.Duration
	// AbandonGrace is how long a handler may run past its timeout before the
	// worker gives up on it: it ends the job's database session, records the
	// timeout and moves on. Default 5s.
	AbandonGrace time.Duration
	// MaxConns is the most database connections the worker opens at once,
	// its listener's included: one budget for all its queues. One listens
	// for notifications and one, at least, serves maintenance; lease-mode
	// queues are left two each where the budget allows; the held-mode
	// queues' runners share the rest, one connection per running batch,
	// taking turns while they are fewer than the runners. At least 3 (2
	// with lease-mode queues only). Default: its largest held-mode queue's
	// Concurrency, plus 2 for each lease-mode queue, plus 2: 12 for the
	// default queue. NewWorkerFromPool takes the pool's MaxConns instead.
	MaxConns int
	// ConnectionCheck is what NewWorker checks of the server's connection
	// limits. Default CheckFree.
	ConnectionCheck ConnectionCheck
	// Retention is how long finished jobs are kept (by default a day for
	// succeeded jobs, a week for failed and cancelled ones). The worker
	// elected leader deletes older ones.
	Retention Retention
	// Middleware runs around every attempt's handler, outermost first.
	Middleware []Middleware
}

// ConnectionCheck says how NewWorker makes sure that the server can give
// the worker its connections (Config.MaxConns, or the pool's connections
// yet to open for NewWorkerFromPool), and fails with
// ErrNotEnoughConnections when it cannot.
type ConnectionCheck string

const (
	// CheckFree wants room for the worker's connections beside every
	// session open now, with a tenth of max_connections (at least 3) left
	// for others.
	CheckFree ConnectionCheck = ""
	// CheckMax wants the worker's connections to fit max_connections with
	// the same margin, whoever is connected now: for a rolling deploy, where
	// the previous release's workers hold connections they are about to give
	// back, or any other moment of known, passing crowding.
	CheckMax ConnectionCheck = "max"
	// CheckNone checks nothing: for a worker that connects through a
	// connection pooler such as PgBouncer, whose limits the server cannot
	// report. (The pooler must pool sessions: the worker holds session
	// locks and LISTENs, which transaction pooling does not keep.)
	CheckNone ConnectionCheck = "none"
)

func (c Config) withDefaults() Config {
	if len(c.Queues) == 0 {
		c.Queues = map[string]QueueConfig{DefaultQueue: {}}
	}
	queues := make(map[string]QueueConfig, len(c.Queues))
	for name, q := range c.Queues {
		queues[name] = q
	}
	c.Queues = queues
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = time.Minute
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	c.PollInterval = min(c.PollInterval, veryLong)
	if c.MaintenanceInterval <= 0 {
		c.MaintenanceInterval = 250 * time.Millisecond
	}
	c.MaintenanceInterval = min(c.MaintenanceInterval, maxMaintenanceInterval)
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 10 * time.Second
	}
	if c.AbandonGrace <= 0 {
		c.AbandonGrace = 5 * time.Second
	}
	c.Retention = c.Retention.withDefaults()
	return c
}

// Worker claims and runs jobs. Create it with NewWorker, register handlers,
// then call Run.
type Worker struct {
	cfg  Config
	log  *slog.Logger
	pool *pgxpool.Pool
	// ownPool: the worker made its pool and closes it.
	ownPool bool
	// listenConfig makes the listener's connection, outside the pool. It keeps
	// pgx's default reaction to a cancelled context (close the connection at
	// once), which is right for a connection that only waits. Nil: the
	// listener holds one of the pool's (NewWorkerFromPool).
	listenConfig *pgx.ConnConfig
	// maxConns is the worker's connection budget, and slots the share of it
	// its held-mode runners take turns on (see divideConnections).
	maxConns int
	slots    *connSlots
	// progressWrites counts the writes of progress reports sent, for tests
	// of the throttle.
	progressWrites atomic.Int64

	mu       sync.RWMutex
	handlers map[string]*Registration
	started  atomic.Bool

	queues map[string]*queue
	// idleChanged tells the listener that a queue got its first idle runner
	// or lost its last (see queue.waitIdle).
	idleChanged chan struct{}

	// idleTimeout bounds how long a job transaction may sit idle while a
	// handler runs: the longest handler timeout plus the abandon grace, set
	// when Run starts. A worker that hangs rather than dies still lets its
	// jobs go then.
	idleTimeout time.Duration
	// claimKinds are the kinds the worker has handlers for, set when Run
	// starts: its claims take no job of another kind, which is left to a
	// worker that has its handler (a rolling deploy that adds a kind)
	// rather than failed here.
	claimKinds []string
	// later takes groups an enqueue kept from moving on after a commit.
	later chan groupsOf

	// id names this worker process in the jobs it claims. Every session
	// of the worker holds the worker lock on it, shared (see LockWorker): a
	// rescuer leaves the jobs of a process with any session left to it.
	id int32
	// claims are the tokens of the held-mode claims whose jobs a runner may
	// still run: maintenance rescues the worker's own jobs with a dead
	// session only when their claim is not among them (rescuer.rescueOwn).
	claims claimTokens
	// running are the attempts whose handlers run now, for cancel requests.
	running runningJobs
	// spare runs handlers and lease-mode runs on goroutines kept for reuse.
	spare *goroutines
	// periodic are the registered periodic jobs (RegisterPeriodic).
	periodic []*periodic
	// maint are the maintenance services, which Run starts.
	maint *maintenance
}

// withModeDefaults gives the settings of the queue's mode their defaults.
func (qc QueueConfig) withModeDefaults() QueueConfig {
	if qc.Concurrency <= 0 {
		qc.Concurrency = 10
		if qc.Mode == ModeLease {
			qc.Concurrency = 100
		}
	}
	if qc.Mode == ModeLease {
		if qc.Lease <= 0 {
			qc.Lease = 30 * time.Second
		}
	} else {
		if qc.BatchSize <= 0 {
			qc.BatchSize = DefaultBatchSize
		}
		if qc.CommitBudget <= 0 {
			qc.CommitBudget = DefaultCommitBudget
		}
	}
	return qc
}

type queue struct {
	name string
	// cfg has its mode and that mode's defaults settled when Run starts.
	cfg    QueueConfig
	cursor claimCursor
	// pace sizes held-mode batches.
	pace pace
	// wake holds at most one pending wake-up; an idle runner takes it.
	wake chan struct{}
	// idle counts the runners waiting for a wake-up. While there is one,
	// the listener holds the queue's idle lock, so that enqueues notify;
	// while there is none, they need not (see pgtask.enqueue_jobs).
	idle atomic.Int32
	// idleChanged is the worker's: see Worker.idleChanged.
	idleChanged chan struct{}
	// rates is what the runners know of the queue's rate keys.
	rates atomic.Pointer[rateClock]
}

func (q *queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// waitIdle counts a runner as idle until the returned function is called:
// from before it waits for a wake-up, which its last claim found no work
// to need, to when it stops waiting.
func (q *queue) waitIdle() (busy func()) {
	if q.idle.Add(1) == 1 {
		q.idleChange()
	}
	return func() {
		if q.idle.Add(-1) == 0 {
			q.idleChange()
		}
	}
}

func (q *queue) idleChange() {
	select {
	case q.idleChanged <- struct{}{}:
	default:
	}
}

// NewWorker creates a worker with a connection pool of its own, built from
// poolConfig (see pgxpool.ParseConfig). The worker opens at most
// Config.MaxConns connections: the pool's MaxConns is set to one fewer, and
// the last, outside the pool, listens for notifications. A cancelled handler
// query is cancelled on the server instead of closing the connection, so the
// job's transaction survives to record the failure.
//
// NewWorker connects once to check that the worker can work, and fails with
// one clear error when it cannot: the database cannot be reached, its
// schema is missing or older than this code (ErrSchemaNotCurrent), or the
// server cannot give the worker its connections and still leave a tenth of
// max_connections to others, or MaxConns is too few for the worker's queues
// (ErrNotEnoughConnections).
func NewWorker(ctx context.Context, poolConfig *pgxpool.Config, cfg Config) (*Worker, error) {
	if poolConfig == nil {
		return nil, errors.New("new worker: pool config is nil")
	}
	w, err := newWorker(cfg)
	if err != nil {
		return nil, err
	}
	w.maxConns = cmp.Or(w.cfg.MaxConns, defaultMaxConns(w.cfg.Queues))
	if err := checkMaxConns(w.maxConns, w.cfg.Queues, "Config.MaxConns"); err != nil {
		return nil, fmt.Errorf("new worker: %w", err)
	}
	pc := poolConfig.Copy()
	// The listener's connection is the budget's last.
	pc.MaxConns = int32(w.maxConns - 1)
	pc.MinConns = min(pc.MinConns, pc.MaxConns)
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		pc.ConnConfig.RuntimeParams["application_name"] = "pgtask worker"
	}
	// Claiming, advancing groups and rescuing read what was committed after
	// they took their locks, which needs READ COMMITTED whatever the database
	// or role defaults to (the schema's functions refuse other levels).
	pc.ConnConfig.RuntimeParams["default_transaction_isolation"] = "read committed"
	w.listenConfig = pc.ConnConfig.Copy()
	// The pool's connections plus the listener's.
	if err := checkDatabase(ctx, w.listenConfig, w.maxConns, w.cfg.ConnectionCheck); err != nil {
		return nil, fmt.Errorf("new worker: %w", err)
	}
	userAfterConnect := pc.AfterConnect
	pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if userAfterConnect != nil {
			if err := userAfterConnect(ctx, c); err != nil {
				return err
			}
		}
		return gen.New(c).LockWorker(ctx, w.id)
	}
	pc.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{
			Conn:               c,
			CancelRequestDelay: 0,
			DeadlineDelay:      5 * time.Second,
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("new worker: create pool: %w", err)
	}
	w.pool = pool
	w.ownPool = true
	w.maint = newMaintenance(w)
	return w, nil
}

// NewWorkerFromPool creates a worker that runs its jobs on connections of
// the application's pool, which it does not close. The pool's MaxConns is
// the worker's connection budget (Config.MaxConns, which may be left unset):
// its listener holds one of the pool's connections while it runs, one at
// least is left to maintenance and the application's own statements, and
// its queues share the rest (see Config.MaxConns).
//
// The pool must hold the least the worker can work on (3 connections with
// a held-mode queue, 2 with lease-mode queues only), and its sessions must
// default to READ COMMITTED, which pgtask's group and claim functions need.
// NewWorkerFromPool checks both, and what NewWorker checks, and fails with
// one clear error (ErrNotEnoughConnections, ErrSchemaNotCurrent, ...)
// rather than a worker that cannot work.
//
// Unlike NewWorker's own pool, a pool built with pgx's defaults closes a
// connection whose query is cancelled: a handler that times out inside a
// query then costs its batch's transaction, whose jobs are recorded as
// retried attempts.
func NewWorkerFromPool(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Worker, error) {
	if pool == nil {
		return nil, errors.New("new worker: pool is nil")
	}
	w, err := newWorker(cfg)
	if err != nil {
		return nil, err
	}
	pc := pool.Config()
	w.maxConns = int(pc.MaxConns)
	if w.cfg.MaxConns != 0 && w.cfg.MaxConns != w.maxConns {
		return nil, fmt.Errorf("new worker: Config.MaxConns is %d, but a worker on the application's pool has the pool's MaxConns, %d: "+
			"leave Config.MaxConns unset, or size the pool", w.cfg.MaxConns, w.maxConns)
	}
	if err := checkMaxConns(w.maxConns, w.cfg.Queues, "the pool's MaxConns"); err != nil {
		return nil, fmt.Errorf("new worker: %w", err)
	}
	// The server must have room for the connections the pool has yet to
	// open, the listener's among them.
	unopened := max(0, int(pc.MaxConns)-int(pool.Stat().TotalConns()))
	if err := checkDatabase(ctx, pc.ConnConfig, unopened, w.cfg.ConnectionCheck); err != nil {
		return nil, fmt.Errorf("new worker: %w", err)
	}
	if err := checkIsolation(ctx, pool); err != nil {
		return nil, fmt.Errorf("new worker: %w", err)
	}
	w.pool = pool
	w.maint = newMaintenance(w)
	return w, nil
}

// newWorker makes a worker without its pool.
func newWorker(cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	w := &Worker{
		cfg:         cfg,
		log:         cfg.Logger,
		handlers:    map[string]*Registration{},
		queues:      map[string]*queue{},
		idleChanged: make(chan struct{}, 1),
		id:          newWorkerID(),
		claims:      claimTokens{held: map[int64]struct{}{}},
		spare:       newGoroutines(),
	}
	switch cfg.ConnectionCheck {
	case CheckFree, CheckMax, CheckNone:
	default:
		return nil, fmt.Errorf("new worker: ConnectionCheck %q is none of CheckFree, CheckMax and CheckNone", cfg.ConnectionCheck)
	}
	if cfg.MaxConns < 0 {
		return nil, fmt.Errorf("new worker: MaxConns is %d; leave it 0 for the default", cfg.MaxConns)
	}
	for name, qc := range cfg.Queues {
		if name == "" {
			return nil, errors.New("new worker: a queue name is empty")
		}
		if err := checkName("queue", name, MaxQueueBytes); err != nil {
			return nil, fmt.Errorf("new worker: %w", err)
		}
		if err := qc.Mode.check(); err != nil {
			return nil, fmt.Errorf("new worker: queue %s: %w", name, err)
		}
		if err := checkModeSettings(name, qc, qc.Mode, "queue "+name+" runs"); err != nil {
			return nil, fmt.Errorf("new worker: %w", err)
		}
		w.queues[name] = &queue{name: name, cfg: qc, wake: make(chan struct{}, 1), idleChanged: w.idleChanged}
		w.queues[name].rates.Store(&rateClock{})
	}
	return w, nil
}

// Pool is the worker's connection pool. Enqueueing through it is fine, but
// every connection it lends out is one fewer for running jobs.
func (w *Worker) Pool() *pgxpool.Pool { return w.pool }

// Close closes the worker's pool, unless it is the application's (see
// NewWorkerFromPool). Call it after Run has returned.
func (w *Worker) Close() {
	w.spare.stop()
	if w.ownPool {
		w.pool.Close()
	}
}

// Register adds a handler. It fails for a kind registered twice and after
// Run has started.
func (w *Worker) Register(r Registration) error {
	if r.Kind == "" {
		return errors.New("register: kind is empty")
	}
	if r.Handler == nil {
		return fmt.Errorf("register %s: handler is nil", r.Kind)
	}
	if err := checkName("kind", r.Kind, MaxKindBytes); err != nil {
		return fmt.Errorf("register: %w", err)
	}
	if w.started.Load() {
		return fmt.Errorf("register %s: the worker is already running", r.Kind)
	}
	if err := r.Mode.check(); err != nil {
		return fmt.Errorf("register %s: %w", r.Kind, err)
	}
	if math.IsNaN(r.Backoff.Jitter) {
		return fmt.Errorf("register %s: Backoff.Jitter is NaN; want a fraction in [0, 1], or negative for none", r.Kind)
	}
	if r.MaxSnoozes < 0 {
		return fmt.Errorf("register %s: MaxSnoozes is %d; want a positive cap, or zero for DefaultMaxSnoozes (%d)", r.Kind, r.MaxSnoozes, DefaultMaxSnoozes)
	}
	if r.MaxSnoozes == 0 {
		r.MaxSnoozes = DefaultMaxSnoozes
	}
	if r.Timeout <= 0 {
		r.Timeout = w.cfg.DefaultTimeout
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.handlers[r.Kind]; dup {
		return fmt.Errorf("register %s: kind already has a handler", r.Kind)
	}
	if w.queues[r.Queue] != nil {
		// The mode the kind needs is one its queue can run: the queue's
		// configured mode, or that of the kinds registered for it before.
		// Its settings are those of that mode.
		mode, from, err := w.modeOf(r.Queue, &r)
		if err != nil {
			return fmt.Errorf("register %s: %w", r.Kind, err)
		}
		if err := checkModeSettings(r.Queue, w.queues[r.Queue].cfg, mode, modeBy(r.Queue, from)); err != nil {
			return fmt.Errorf("register %s: %w", r.Kind, err)
		}
	}
	w.handlers[r.Kind] = &r
	return nil
}

func (w *Worker) kinds() []string {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return slices.Sorted(maps.Keys(w.handlers))
}

// Run works jobs until ctx is cancelled, then stops claiming, gives running
// jobs ShutdownGrace to finish, cancels the rest (their failure is recorded
// and they are retried) and returns. Jobs that were claimed but not started
// are handed back untouched. Database errors do not stop Run: it logs them
// and retries, so a database restart is survived.
func (w *Worker) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("run: the worker is already running")
	}
	// hard outlives ctx by the shutdown grace: running jobs use it.
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(w.cfg.ShutdownGrace, cancelHard)
		context.AfterFunc(hard, func() { t.Stop() })
	})
	defer stop()

	if err := w.settleModes(); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	w.divideConnections()
	w.log.Info("pgtask worker starting", "queues", w.queueModes(), "kinds", w.kinds())
	for _, kind := range w.kinds() {
		if reg := w.handler(kind); reg.Queue != "" && w.queues[reg.Queue] == nil {
			w.log.Warn("pgtask: this worker handles a kind whose queue it does not serve; such jobs wait for another worker",
				"kind", kind, "queue", reg.Queue, "served", slices.Sorted(maps.Keys(w.queues)))
		}
	}
	w.recordKinds(ctx, gen.New(w.pool))
	w.idleTimeout = w.longestIdle()
	w.later = make(chan groupsOf, 64)
	w.spare.labelFrom(ctx)
	var wg, runners sync.WaitGroup
	wg.Go(func() { w.listen(ctx) })
	wg.Go(func() { w.maint.run(ctx) })
	// Runners hand it work until the last of them has stopped.
	advancing, stopAdvancing := context.WithCancel(context.WithoutCancel(ctx))
	wg.Go(func() { w.advanceBusyGroups(advancing) })
	for _, q := range w.queues {
		if q.cfg.Mode == ModeLease {
			runners.Go(newLeaser(ctx, hard, w, q).loop)
			continue
		}
		for range q.cfg.Concurrency {
			r := &runner{w: w, q: q, ctx: ctx, hard: hard}
			runners.Go(r.loop)
		}
	}
	runners.Wait()
	stopAdvancing()
	wg.Wait()
	w.spare.stop()
	w.log.Info("pgtask worker stopped")
	return nil
}

// settleModes gives each queue its mode, from its configuration or else
// from the kinds registered for it, and its concurrency, and fixes the
// kinds the worker claims. A kind whose handler needs another mode than its
// queue's is an error.
//
// Register refuses such a kind already, so that the error reaches the
// program; this check stays for what Register cannot see.
func (w *Worker) settleModes() error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	for _, name := range slices.Sorted(maps.Keys(w.queues)) {
		q := w.queues[name]
		mode, from, err := w.modeOf(name, nil)
		if err != nil {
			return err
		}
		if err := checkModeSettings(name, q.cfg, mode, modeBy(name, from)); err != nil {
			return err
		}
		if mode == "" {
			mode = ModeHeld
		}
		q.cfg.Mode = mode
		q.cfg = q.cfg.withModeDefaults()
	}
	// Registration is over: the kinds to claim are fixed too. None is an
	// empty list, not NULL (any kind).
	w.claimKinds = slices.Sorted(maps.Keys(w.handlers))
	if w.claimKinds == nil {
		w.claimKinds = []string{}
	}
	return nil
}

// modeOf is the mode queue name runs in by its configuration, else by the
// kinds registered for it, with extra (may be nil) counted among them, and
// what decided it ("configured", "kind k"); empty if nothing does. A kind
// whose mode disagrees is an error. The caller holds w.mu.
func (w *Worker) modeOf(name string, extra *Registration) (mode Mode, from string, err error) {
	mode, from = w.queues[name].cfg.Mode, "configured"
	if mode == "" {
		from = ""
	}
	regs := make([]*Registration, 0, len(w.handlers)+1)
	for _, kind := range slices.Sorted(maps.Keys(w.handlers)) {
		regs = append(regs, w.handlers[kind])
	}
	if extra != nil {
		regs = append(regs, extra)
	}
	for _, reg := range regs {
		if reg.Queue != name || reg.Mode == "" {
			continue
		}
		if err := reg.Mode.check(); err != nil {
			return "", "", fmt.Errorf("kind %s: %w", reg.Kind, err)
		}
		switch {
		case mode == "":
			mode, from = reg.Mode, "kind "+reg.Kind
		case mode != reg.Mode:
			return "", "", fmt.Errorf("kind %s needs mode %s, but queue %s runs in mode %s (%s): "+
				"serve the kinds of different modes from different queues, or set QueueConfig.Mode", reg.Kind, reg.Mode, name, mode, from)
		}
	}
	return mode, from, nil
}

// modeBy says what runs queue name in its mode, for errors: from is what
// modeOf says decided it.
func modeBy(name, from string) string {
	if kind, ok := strings.CutPrefix(from, "kind "); ok {
		return "kind " + kind + " runs the queue"
	}
	return "queue " + name + " runs"
}

// queueNames are the names of the worker's queues, sorted.
func (w *Worker) queueNames() []string {
	return slices.Sorted(maps.Keys(w.queues))
}

// queueModes names the queues with their modes, for the start log:
// "default (held)".
func (w *Worker) queueModes() []string {
	var named []string
	for _, name := range slices.Sorted(maps.Keys(w.queues)) {
		named = append(named, fmt.Sprintf("%s (%s)", name, w.queues[name].cfg.Mode))
	}
	return named
}

// longestIdle is the idle timeout of job transactions: long enough for any
// registered handler's timeout and the abandon grace. The server takes at
// most 2^31-1 ms (24.8 days); 0 would mean no limit at all.
func (w *Worker) longestIdle() time.Duration {
	longest := w.cfg.DefaultTimeout // for kinds the worker does not know
	for _, kind := range w.kinds() {
		longest = max(longest, w.handler(kind).Timeout)
	}
	return min(addDurations(longest, w.cfg.AbandonGrace, 10*time.Second), maxIdleInTransaction)
}

// maxIdleInTransaction is the largest idle_in_transaction_session_timeout
// PostgreSQL accepts.
const maxIdleInTransaction = math.MaxInt32 * time.Millisecond

// addDurations adds durations that are not negative, and gives the largest
// time.Duration for a sum past it: a timeout or grace near the largest one
// means "very long", not a negative time.
func addDurations(ds ...time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		if d > math.MaxInt64-sum {
			return math.MaxInt64
		}
		sum += d
	}
	return sum
}

// veryLong is what an interval near the largest time.Duration counts as:
// as long, for anyone, but with room for the jitter spread over it.
const veryLong = time.Duration(math.MaxInt64 / 2)

// maxMaintenanceInterval is the longest maintenance interval: a leader's
// term is three of its election periods (see Worker.term), and the
// database counts terms in milliseconds of an int32.
const maxMaintenanceInterval = maxIdleInTransaction / (3 * electEveryTicks)

// minLease is the shortest QueueConfig.Lease: a shorter lease runs out before
// its heartbeat, every third of it, can reach the database and back.
const minLease = time.Second

// afterCommitPatience is how long (ms) the worker, after a commit, keeps
// trying to advance groups that had an enqueue in flight. Maintenance
// advances whatever is still left.
const afterCommitPatience = 500

// groupsOf names groups of a queue.
type groupsOf struct {
	queue string
	keys  []string
}

func (w *Worker) advanceBusyGroups(ctx context.Context) {
	for {
		var g groupsOf
		select {
		case <-ctx.Done():
			return
		case g = <-w.later:
		}
		actx, cancel := bookCtx(ctx)
		still, err := gen.New(w.pool).AdvanceGroups(actx, gen.AdvanceGroupsParams{Queue: g.queue, GroupKeys: g.keys, PatienceMs: afterCommitPatience})
		cancel()
		if err != nil || len(still) > 0 {
			w.log.Debug("pgtask: groups left for maintenance to advance", "queue", g.queue, "groups", still, "error", err)
		}
	}
}

// newWorkerID draws a random positive id. Two live workers drawing the same
// one (a chance in two billion) would each keep the other's jobs from
// being rescued while either lives.
func newWorkerID() int32 {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return int32(binary.BigEndian.Uint32(b[:]) >> 1)
}

// wakeAll wakes one idle runner of every queue, after notifications may have
// been lost.
func (w *Worker) wakeAll() {
	w.lookBehindAll()
	for _, q := range w.queues {
		q.signal()
	}
}

// lookBehindAll makes every queue's next claim look back from the start of
// the claim index (see claimCursor).
func (w *Worker) lookBehindAll() {
	for _, q := range w.queues {
		q.cursor.lookBehind()
	}
}
