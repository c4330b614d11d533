// Quickstart: a worker and a producer in one process, using the typed
// functions generated from package tasks. Emails to the same account go out
// one at a time, in order; image resizes run in parallel; a sum returns a
// typed result. It finds a database as the README says, works the jobs,
// prints what happens and exits.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/examples/quickstart/tasks"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	dbURL, cleanup, err := database(ctx)
	if err != nil {
		return err
	}
	defer cleanup()

	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := runtime.Migrate(ctx, pool); err != nil {
		return err
	}

	poolConfig, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	worker, err := runtime.NewWorker(ctx, poolConfig, runtime.Config{
		Queues: map[string]runtime.QueueConfig{"default": {Concurrency: 4}, "emails": {Concurrency: 2}},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return err
	}
	defer worker.Close()

	var done atomic.Int32
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("%6.3fs  "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}
	must(tasks.HandleSendEmail(worker, func(ctx context.Context, job *runtime.Job, e tasks.SendEmail) error {
		if e.Subject == "flaky" && job.Attempt == 1 {
			say("email to %s failed on attempt 1; account %d waits for its retry", e.To, e.AccountID)
			return errors.New("smtp: temporary failure")
		}
		time.Sleep(20 * time.Millisecond)
		say("sent %-16q to %s (account %d, attempt %d)", e.Subject, e.To, e.AccountID, job.Attempt)
		done.Add(1)
		return nil
	}))
	must(tasks.HandleResizeImage(worker, func(ctx context.Context, job *runtime.Job, img tasks.ResizeImage) error {
		time.Sleep(50 * time.Millisecond)
		say("resized %s to %dpx", img.URL, img.Width)
		done.Add(1)
		return nil
	}))
	must(tasks.HandleAdd(worker, func(ctx context.Context, job *runtime.Job, in tasks.Add) (tasks.Sum, error) {
		done.Add(1)
		return tasks.Sum{Value: in.A + in.B}, nil
	}))

	runCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	ran := make(chan error, 1)
	go func() { ran <- worker.Run(runCtx) }()

	// Emails: two accounts, four each, in one statement. Each account's
	// emails go out in this order, one at a time.
	var emails []tasks.SendEmail
	for _, subject := range []string{"welcome", "flaky", "your invoice", "weekly digest"} {
		for account := int64(1); account <= 2; account++ {
			emails = append(emails, tasks.SendEmail{AccountID: account, To: fmt.Sprintf("user%d@example.com", account), Subject: subject})
		}
	}
	if _, err := tasks.EnqueueSendEmailMany(ctx, pool, emails); err != nil {
		return err
	}
	// Resizes, enqueued inside a transaction: they exist once it commits.
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	for i := range 4 {
		img := tasks.ResizeImage{URL: fmt.Sprintf("https://img.example.com/%d.png", i), Width: 640}
		if _, err := tasks.EnqueueResizeImage(ctx, tx, img); err != nil {
			tx.Rollback(ctx) //nolint:errcheck // the enqueue error is the one to report
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	sum, err := tasks.EnqueueAdd(ctx, pool, tasks.Add{A: 40, B: 2})
	if err != nil {
		return err
	}
	// An invalid email is refused before anything is inserted.
	_, err = tasks.EnqueueSendEmail(ctx, pool, tasks.SendEmail{AccountID: 3, To: "not an address", Subject: "hi"})
	say("refused: %v", err)
	if err == nil {
		return errors.New("an invalid email was accepted")
	}
	total := int32(len(emails) + 4 + 1)
	say("enqueued %d jobs", total)

	// Waits watch ran too: an error Run returns is never left unread.
	for done.Load() < total {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-ran:
			return fmt.Errorf("the worker stopped: %w", cmp.Or(err, ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
	for {
		result, status, err := tasks.GetAddResult(ctx, pool, sum)
		if errors.Is(err, runtime.ErrNoResult) && !status.Finished() {
			select {
			case err := <-ran:
				return fmt.Errorf("the worker stopped: %w", cmp.Or(err, ctx.Err()))
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return err
		}
		say("add job %d %s: 40 + 2 = %d", sum, status, result.Value)
		break
	}
	stopWorker()
	if err := <-ran; err != nil {
		return err
	}
	say("all %d jobs done; worker stopped", total)
	return nil
}

// database finds a server (DATABASE_URL, then localhost:5432, then a
// throwaway one) and, unless DATABASE_URL named one, works in a fresh
// database that it drops at the end.
func database(ctx context.Context) (string, func(), error) {
	server, err := pgtasktest.Discover(ctx, pgtasktest.DiscoverOptions{
		EnvVars: []string{"DATABASE_URL"},
		Logf:    func(format string, args ...any) { fmt.Printf(format+"\n", args...) },
	})
	if err != nil {
		return "", nil, err
	}
	if server.Source == pgtasktest.SourceEnv {
		return server.URL, func() { server.Close() }, nil
	}
	dbURL, err := pgtasktest.CreateDatabase(ctx, server.URL, "")
	if err != nil {
		server.Close()
		return "", nil, err
	}
	return dbURL, func() {
		pgtasktest.DropDatabase(context.WithoutCancel(ctx), server.URL, dbURL) //nolint:errcheck // best effort
		server.Close()
	}, nil
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
