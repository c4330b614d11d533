// Command hello declares a task, enqueues a job of it and works the job:
// the complete program the README shows. DATABASE_URL names the database.
package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/examples/hello/tasks"
	"github.com/pgtask/pgtask/runtime"
)

func main() {
	if err := run(context.Background(), os.Getenv("DATABASE_URL")); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, databaseURL string) error {
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := runtime.Migrate(ctx, pool); err != nil {
		return err
	}

	// A worker with its own pool, serving the default queue.
	poolConfig, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return err
	}
	worker, err := runtime.NewWorker(ctx, poolConfig, runtime.Config{})
	if err != nil {
		return err
	}
	defer worker.Close()
	err = tasks.HandleGreet(worker, func(ctx context.Context, job *runtime.Job, g tasks.Greet) (tasks.Greeting, error) {
		return tasks.Greeting{Text: "Hello, " + g.Name + "!"}, nil
	})
	if err != nil {
		return err
	}
	// Run works jobs until workCtx is cancelled. Should it stop on its own,
	// its error cancels ctx, so the wait below cannot outlast it unseen.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	workCtx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := worker.Run(workCtx); err != nil {
			cancel(fmt.Errorf("the worker stopped: %w", err))
		}
	}()
	defer func() { stop(); <-stopped }()

	// Enqueue a job (pass a pgx.Tx instead of the pool to enqueue in your
	// own transaction), then wait for its typed result.
	id, err := tasks.EnqueueGreet(ctx, pool, tasks.Greet{Name: "world"})
	if err != nil {
		return err
	}
	greeting, err := tasks.WaitGreetResult(ctx, pool, id)
	if err != nil {
		return fmt.Errorf("job %d: %w", id, cmp.Or(context.Cause(ctx), err))
	}
	fmt.Println(greeting.Text)
	return nil
}
