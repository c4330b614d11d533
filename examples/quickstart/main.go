// Quickstart: a worker and a producer in one process. Emails to the same
// account go out one at a time, in order; image resizes run in parallel; a
// sum returns a result. It finds a database as the README says, works the
// jobs, prints what happens and exits.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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

type sendEmail struct {
	AccountID int64  `json:"account_id"`
	To        string `json:"to"`
	Subject   string `json:"subject"`
}

type resizeImage struct {
	URL   string `json:"url"`
	Width int    `json:"width"`
}

type add struct {
	A, B int
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
	must(worker.Register(runtime.Registration{Kind: "send_email", Handler: func(ctx context.Context, job *runtime.Job) error {
		e, err := runtime.DecodePayload[sendEmail](job)
		if err != nil {
			return err
		}
		if e.Subject == "flaky" && job.Attempt == 1 {
			say("email to %s failed on attempt 1; its account waits for the retry", e.To)
			return errors.New("smtp: temporary failure")
		}
		time.Sleep(20 * time.Millisecond)
		say("sent %-20q to %s (account %d, attempt %d)", e.Subject, e.To, e.AccountID, job.Attempt)
		done.Add(1)
		return nil
	}, Backoff: runtime.Backoff{Min: 200 * time.Millisecond}}))
	must(worker.Register(runtime.Registration{Kind: "resize_image", Handler: func(ctx context.Context, job *runtime.Job) error {
		img, err := runtime.DecodePayload[resizeImage](job)
		if err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
		say("resized %s to %dpx", img.URL, img.Width)
		done.Add(1)
		return nil
	}}))
	must(worker.Register(runtime.Registration{Kind: "add", Handler: func(ctx context.Context, job *runtime.Job) error {
		in, err := runtime.DecodePayload[add](job)
		if err != nil {
			return err
		}
		done.Add(1)
		return job.SetResult(in.A + in.B)
	}}))

	runCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	ran := make(chan error, 1)
	go func() { ran <- worker.Run(runCtx) }()

	var reqs []runtime.EnqueueRequest
	for _, subject := range []string{"welcome", "flaky", "your invoice", "weekly digest"} {
		for account := int64(1); account <= 2; account++ {
			reqs = append(reqs, request("send_email", sendEmail{AccountID: account, To: fmt.Sprintf("user%d@example.com", account), Subject: subject},
				runtime.WithQueue("emails"), runtime.WithGroup(fmt.Sprint(account))))
		}
	}
	for i := range 4 {
		reqs = append(reqs, request("resize_image", resizeImage{URL: fmt.Sprintf("https://img.example.com/%d.png", i), Width: 640}))
	}
	if _, err := runtime.EnqueueMany(ctx, pool, reqs); err != nil {
		return err
	}
	sum, err := runtime.Enqueue(ctx, pool, request("add", add{A: 40, B: 2}))
	if err != nil {
		return err
	}
	total := int32(len(reqs) + 1)
	say("enqueued %d jobs", total)

	for done.Load() < total {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	var info *runtime.JobInfo
	for info == nil || !info.Status.Finished() {
		if info, err = runtime.GetJob(ctx, pool, sum); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	say("add job %d %s with result %s", sum, info.Status, info.Result)
	stopWorker()
	if err := <-ran; err != nil {
		return err
	}
	say("all %d jobs done; worker stopped", total)
	return nil
}

func request(kind string, payload any, opts ...runtime.EnqueueOption) runtime.EnqueueRequest {
	b, err := json.Marshal(payload)
	must(err)
	r := runtime.EnqueueRequest{Kind: kind, Payload: b}
	r.Apply(opts...)
	return r
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
