// Package runtime runs pgtask jobs: background work stored in PostgreSQL,
// with strict FIFO per group, retries with backoff and attempts counted even
// when a worker dies. Each queue runs its jobs in one of two modes, chosen by
// its QueueConfig.Mode (or else by its tasks' declarations): in held mode,
// the default, an attempt runs inside a transaction that holds the job's
// lock; in lease mode the job is claimed with a lease that a heartbeat
// extends, and the handler holds no connection. In both, what the handler
// writes through Job.Tx commits with the job's success, and a lease-mode
// attempt's only while it is still the job's current one.
//
// Declare tasks by embedding Task (or TaskWithResult) and run `pgtask gen`;
// the typed functions it generates are how most code enqueues and handles
// jobs. They call package runtime/taskspec, which is for generated code only.
// This package can also be used directly, by kind name and JSON payload:
//
//	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	if _, err := runtime.Migrate(ctx, pool); err != nil { ... }
//
//	req := runtime.EnqueueRequest{Kind: "send_email", Payload: payload}
//	req.Apply(runtime.WithQueue("emails"), runtime.WithGroup("account-42"))
//	id, err := runtime.Enqueue(ctx, pool, req) // or a pgx.Tx, to enqueue in your transaction
//
//	cfg, _ := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
//	w, _ := runtime.NewWorker(ctx, cfg, runtime.Config{
//		Queues: map[string]runtime.QueueConfig{
//			"emails":  {Concurrency: 10},                            // held mode, the default
//			"exports": {Mode: runtime.ModeLease, Lease: time.Minute}, // long jobs
//		},
//	})
//	err = w.Register(runtime.Registration{Kind: "send_email", Handler: func(ctx context.Context, job *runtime.Job) error {
//		// job.Tx() is the job's transaction: writes through it commit with the job's success.
//		return nil
//	}}) // a registration the worker cannot serve is an error here, not in Run
//	err = w.Run(ctx) // until ctx is cancelled; in a goroutine, have someone wait for its error
package runtime
