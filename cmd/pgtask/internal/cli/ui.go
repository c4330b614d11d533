package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/dashboard"
)

const uiUsage = `usage: pgtask ui [-addr host:port] [-read-only] [-base-path /path] [-allow-host names] [-json] [-database-url URL]

Serves the web dashboard: queues (jobs by status, throughput, oldest wait,
blocked groups, paused), jobs (filtered by queue, kind, group, status and
creation time, a page at a time), each job (payload, result, every failed
attempt's error and stack, timeline), groups (blocked ones and their
head) and concurrency limits. Unless -read-only, it retries and cancels
jobs, one or every job a filter matches, pauses and resumes queues, and
sets and clears limits. Pages need no JavaScript.

Authentication: set PGTASK_UI_USER and PGTASK_UI_PASSWORD to have every
request give that user and password (HTTP basic authentication; use TLS in
front of it off this machine). Without them anyone who reaches the address
can use the dashboard, so the default address is the loopback one.
Actions are POST forms carrying a per-process HMAC token, and a POST from
another site (by its Origin or Sec-Fetch-Site header) is refused. It
answers only requests addressed to the address it serves on (localhost too
on loopback) and to the hosts of -allow-host: a page whose name was made to
resolve to this address (DNS rebinding) gets 421.

It stops on interrupt, letting requests in flight finish. With -json it
says where it serves, and logs, in JSON lines.
`

func ui(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pgtask ui", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, uiUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	addr := fs.String("addr", "127.0.0.1:8080", "the address to listen on")
	readOnly := fs.Bool("read-only", false, "show only: hide the actions and refuse every POST")
	basePath := fs.String("base-path", "", "serve below this path, e.g. /pgtask (behind a proxy that keeps the path)")
	allowHost := fs.String("allow-host", "", "comma-separated `names` it answers to besides its address, e.g. jobs.example.com or localhost:9000 (behind a proxy or tunnel)")
	url := databaseFlag(fs)
	asJSON := fs.Bool("json", false, "print the address served and the log as JSON lines")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		fmt.Fprintf(stderr, "pgtask ui: unexpected argument %q\n", rest[0])
		return errUsage
	}
	auth, err := uiAuth()
	if err != nil {
		fmt.Fprintf(stderr, "pgtask ui: %v\n", err)
		return errUsage
	}
	opts := dashboard.Options{BasePath: *basePath, ReadOnly: *readOnly, BasicAuth: auth}
	if *allowHost != "" {
		opts.AllowedHosts = strings.Split(*allowHost, ",")
	}
	if err := opts.Check(); err != nil {
		fmt.Fprintf(stderr, "pgtask ui: %v\n", err)
		return errUsage
	}
	cc, err := databaseConfig(*url)
	if err != nil {
		return err
	}
	pc, err := pgxpool.ParseConfig(*url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	pc.ConnConfig.Database = cc.Database
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	if err := runtime.CheckSchema(ctx, pool); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	var logger *slog.Logger
	if *asJSON {
		logger = slog.New(slog.NewJSONHandler(stderr, nil))
	} else {
		logger = slog.New(slog.NewTextHandler(stderr, nil))
	}
	opts.Logger = logger
	handler := dashboard.New(pool, opts)
	served := fmt.Sprintf("http://%s%s/", ln.Addr(), strings.TrimSuffix(*basePath, "/"))
	switch {
	case *asJSON:
		if err := json.NewEncoder(stdout).Encode(map[string]any{"serving": served, "read_only": *readOnly}); err != nil {
			return err
		}
	case *readOnly:
		fmt.Fprintf(stdout, "pgtask ui: serving %s (read-only)\n", served)
	default:
		fmt.Fprintf(stdout, "pgtask ui: serving %s\n", served)
	}
	if auth == nil && !loopback(ln.Addr()) {
		fmt.Fprintln(stderr, "pgtask ui: warning: listening beyond this machine without a password; set PGTASK_UI_USER and PGTASK_UI_PASSWORD")
	}
	return serve(ctx, ln, handler, logger)
}

// uiAuth reads the basic-auth credentials from the environment: both or
// neither.
func uiAuth() (*dashboard.BasicAuth, error) {
	user, password := os.Getenv("PGTASK_UI_USER"), os.Getenv("PGTASK_UI_PASSWORD")
	switch {
	case user == "" && password == "":
		return nil, nil
	case user == "" || password == "":
		return nil, errors.New("set both PGTASK_UI_USER and PGTASK_UI_PASSWORD, or neither")
	}
	return &dashboard.BasicAuth{User: user, Password: password}, nil
}

func loopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// serve serves h on ln until ctx is done, then gives requests in flight up
// to 10 seconds to finish.
func serve(ctx context.Context, ln net.Listener, h http.Handler, logger *slog.Logger) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
