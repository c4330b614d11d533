// Package tour holds the code the docs pages show, in functions that
// compile: each Go block of docs/*.md is this code, or another compiled file
// of the repository, as it is (docs/docs_test.go checks that it is). The
// functions are not called; what they show is run by the tests of the
// packages they use.
package tour

import (
	"context"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/examples/tour/tasks"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/dashboard"
	"github.com/pgtask/pgtask/runtime/pgtaskotel"
)

// enqueue is docs/tasks.md's "Enqueueing".
func enqueue(ctx context.Context, pool *pgxpool.Pool, email tasks.SendEmail) error {
	id, err := tasks.EnqueueSendEmail(ctx, pool, tasks.SendEmail{AccountID: 42, To: "a@example.com", Subject: "hi"})
	if err != nil || id == 0 {
		return err
	}

	tx, _ := pool.Begin(ctx)
	// ... your writes ...
	tasks.EnqueueSendEmail(ctx, tx, email)
	tx.Commit(ctx)
	return nil
}

// handle is docs/tasks.md's "Handling".
func handle(ctx context.Context, pool *pgxpool.Pool, id runtime.JobID) error {
	cfg, _ := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	w, err := runtime.NewWorker(ctx, cfg, runtime.Config{
		Queues: map[string]runtime.QueueConfig{"emails": {Concurrency: 10}},
	})
	// Registration errors (a mode the kind's queue cannot run, a kind registered
	// twice) come from the Handle functions, not from Run.
	err = tasks.HandleSendEmail(w, func(ctx context.Context, job *runtime.Job, e tasks.SendEmail) error {
		// job.Tx() holds the job's lock; writes through it commit with the job's success.
		return send(ctx, e)
	})
	err = tasks.HandleAdd(w, func(ctx context.Context, job *runtime.Job, in tasks.Add) (tasks.Sum, error) {
		return tasks.Sum{Value: in.A + in.B}, nil
	})
	err = w.Run(ctx) // until ctx is cancelled; in a goroutine, have someone wait for its error

	sum, status, err := tasks.GetAddResult(ctx, pool, id) // runtime.ErrNoResult until it succeeded
	sum, err = tasks.WaitAddResult(ctx, pool, id)         // blocks until the job finishes, or ctx ends
	_, _ = sum, status
	return err
}

func send(ctx context.Context, e tasks.SendEmail) error { return nil }

// periodic is docs/unique-and-periodic.md's "Periodic jobs".
func periodic(w *runtime.Worker, berlin *time.Location) error {
	err := w.RegisterPeriodic(runtime.PeriodicJob{
		Name:     "nightly-report",
		Schedule: "0 3 * * *", // cron; or "@hourly", "@every 10m", "CRON_TZ=Asia/Tokyo 0 9 * * MON-FRI"
		Location: berlin,      // default UTC
		Enqueue: func(ctx context.Context, tx runtime.DB, tick time.Time) error {
			_, err := tasks.EnqueueReport(ctx, tx, tasks.Report{Day: tick})
			return err
		},
	})
	return err
}

// observe is docs/observability.md's "Metrics and traces".
func observe(ctx context.Context, pool *pgxpool.Pool, poolConfig *pgxpool.Config, queues map[string]runtime.QueueConfig) error {
	cfg := runtime.Config{Queues: queues}
	pgtaskotel.Instrument(&cfg) // its middleware first in cfg.Middleware; the enqueue hook, once per process
	worker, err := runtime.NewWorker(ctx, poolConfig, cfg)
	// ...
	reg, err := pgtaskotel.ObserveQueues(pool) // the queue gauges, in one process per database
	if err != nil {
		return err
	}
	defer reg.Unregister()
	return worker.Run(ctx)
}

// mount is docs/dashboard.md's.
func mount(mux *http.ServeMux, pool *pgxpool.Pool) {
	mux.Handle("/pgtask/", dashboard.New(pool, dashboard.Options{
		BasePath:     "/pgtask",
		BasicAuth:    &dashboard.BasicAuth{User: "ops", Password: os.Getenv("PGTASK_UI_PASSWORD")},
		AllowedHosts: []string{"ops.example.com"}, // the name it is reached by
	}))
}
