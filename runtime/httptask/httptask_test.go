package httptask_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/httptask"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// Every test calls local httptest servers, with a real worker on a
// database of its own; nothing leaves the machine.

// start runs a worker that serves the "http" queue in mode with the
// handler cfg configures, until the test ends, and returns a pool on its
// database.
func start(t *testing.T, cfg httptask.Config, mode runtime.Mode) *pgxpool.Pool {
	t.Helper()
	return startLogged(t, cfg, mode, slog.New(slog.DiscardHandler))
}

// startLogged is start with the worker logging to log.
func startLogged(t *testing.T, cfg httptask.Config, mode runtime.Mode, log *slog.Logger) *pgxpool.Pool {
	t.Helper()
	url := pgtasktest.NewDatabase(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	w, err := runtime.NewWorker(ctx, pc, runtime.Config{
		Queues:              map[string]runtime.QueueConfig{"http": {Mode: mode}},
		MaintenanceInterval: 50 * time.Millisecond,
		Logger:              log,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := httptask.Handle(w, cfg); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
		w.Close()
	})
	return pool
}

// local is cfg allowed to call the test servers, which listen on loopback.
func local(cfg httptask.Config) httptask.Config {
	cfg.AllowPrivate = true
	return cfg
}

// serve starts a test server, closed when the test ends.
func serve(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

func enqueue(t *testing.T, pool *pgxpool.Pool, r httptask.Request, opts ...runtime.EnqueueOption) runtime.JobID {
	t.Helper()
	id, err := httptask.EnqueueRequest(context.Background(), pool, r, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// waitFor polls job id until done says it is where the test wants it.
func waitFor(t *testing.T, pool *pgxpool.Pool, id runtime.JobID, what string, done func(*runtime.JobInfo) bool) *runtime.JobInfo {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := runtime.GetJob(context.Background(), pool, id)
		if err != nil {
			t.Fatal(err)
		}
		if done(info) {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d is not %s: %s after %d attempts, errors %+v", id, what, info.Status, info.Attempts, info.Errors)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitFinished(t *testing.T, pool *pgxpool.Pool, id runtime.JobID) *runtime.JobInfo {
	t.Helper()
	return waitFor(t, pool, id, "finished", func(i *runtime.JobInfo) bool { return i.Status.Finished() })
}

// waitFailures waits until job id has n failed attempts recorded.
func waitFailures(t *testing.T, pool *pgxpool.Pool, id runtime.JobID, n int) *runtime.JobInfo {
	t.Helper()
	return waitFor(t, pool, id, fmt.Sprintf("failed %d times", n), func(i *runtime.JobInfo) bool { return len(i.Errors) >= n })
}

// result reads a job's typed result, failing the test unless it succeeded.
func result(t *testing.T, pool *pgxpool.Pool, id runtime.JobID) httptask.Response {
	t.Helper()
	waitFinished(t, pool, id)
	resp, status, err := httptask.GetRequestResult(context.Background(), pool, id)
	if err != nil || status != runtime.StatusSucceeded {
		info, _ := runtime.GetJob(context.Background(), pool, id)
		t.Fatalf("job %d: %s, %v; want succeeded (errors %+v)", id, status, err, info.Errors)
	}
	return resp
}

// requireFailedAtOnce checks that job id failed for good on its first
// attempt with an error holding each of wants.
func requireFailedAtOnce(t *testing.T, pool *pgxpool.Pool, id runtime.JobID, wants ...string) *runtime.JobInfo {
	t.Helper()
	info := waitFinished(t, pool, id)
	if info.Status != runtime.StatusFailed || info.Attempts != 1 || len(info.Errors) != 1 {
		t.Fatalf("job %d: %s after %d of %d attempts, errors %+v; want failed at once", id, info.Status, info.Attempts, info.MaxAttempts, info.Errors)
	}
	for _, want := range wants {
		if !strings.Contains(info.Errors[0].Error, want) {
			t.Errorf("job %d's error %q lacks %q", id, info.Errors[0].Error, want)
		}
	}
	return info
}

// seen is what a test server received.
type seen struct {
	mu       sync.Mutex
	requests []*http.Request // with their bodies read into bodies
	bodies   [][]byte
}

func (s *seen) record(r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r.Clone(context.Background()))
	s.bodies = append(s.bodies, body)
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

func (s *seen) get(i int) (*http.Request, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[i], s.bodies[i]
}

func TestCallSucceedsAndStoresTheResponse(t *testing.T) {
	t.Parallel()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			var got seen
			server := serve(t, func(w http.ResponseWriter, r *http.Request) {
				got.record(r)
				w.Header().Set("Content-Type", "text/plain")
				w.Header().Set("ETag", `"v1"`)
				w.Header().Set("X-Not-Kept", "x")
				fmt.Fprint(w, "hello")
			})
			pool := start(t, local(httptask.Config{}), mode)
			id := enqueue(t, pool, httptask.Request{Method: "GET", URL: server.URL + "/greeting?lang=en"})

			resp := result(t, pool, id)
			want := httptask.Response{
				Status:  200,
				URL:     server.URL + "/greeting?lang=en",
				Headers: map[string]string{"Content-Type": "text/plain", "Content-Length": "5", "Etag": `"v1"`},
				Body:    "hello",
			}
			if fmt.Sprint(resp) != fmt.Sprint(want) {
				t.Fatalf("result %+v, want %+v", resp, want)
			}
			r, _ := got.get(0)
			if r.Method != "GET" || r.Header.Get("Idempotency-Key") != fmt.Sprintf("pgtask-%d", id) || r.Header.Get("User-Agent") != "pgtask-http" {
				t.Fatalf("server got %s with headers %v; want GET, Idempotency-Key pgtask-%d, User-Agent pgtask-http", r.Method, r.Header, id)
			}
			if got.count() != 1 {
				t.Fatalf("server called %d times, want once", got.count())
			}
		})
	}
}

func TestBodyAndHeadersArrive(t *testing.T) {
	t.Parallel()
	var got seen
	server := serve(t, func(w http.ResponseWriter, r *http.Request) {
		got.record(r)
		w.WriteHeader(http.StatusCreated)
	})
	pool := start(t, local(httptask.Config{UserAgent: "shop/2.1"}), runtime.ModeLease)

	post, err := httptask.Request{
		Method:  "POST",
		URL:     server.URL + "/orders",
		Headers: map[string]string{"X-Tenant": "acme"},
		Timeout: 5 * time.Second,
	}.WithJSON(map[string]any{"order": 42, "items": []string{"tea"}})
	if err != nil {
		t.Fatal(err)
	}
	binary := []byte{0, 1, 2, 0xff, '\n'}
	put := httptask.Request{
		Method:     "PUT",
		URL:        server.URL + "/blob",
		BodyBase64: binary,
		Headers:    map[string]string{"Content-Type": "application/octet-stream", "idempotency-key": "blob-7"},
	}
	ids, err := httptask.EnqueueRequestMany(context.Background(), pool, []httptask.Request{post, put}, runtime.WithGroup("one-at-a-time"))
	if err != nil {
		t.Fatal(err)
	}
	if resp := result(t, pool, ids[0]); resp.Status != http.StatusCreated {
		t.Fatalf("POST result %+v, want 201", resp)
	}
	if resp := result(t, pool, ids[1]); resp.Status != http.StatusCreated {
		t.Fatalf("PUT result %+v, want 201", resp)
	}

	r, body := got.get(0) // the group runs in order
	if r.Method != "POST" || r.URL.Path != "/orders" || string(body) != `{"items":["tea"],"order":42}` ||
		r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Tenant") != "acme" ||
		r.Header.Get("User-Agent") != "shop/2.1" || r.Header.Get("Idempotency-Key") != fmt.Sprintf("pgtask-%d", ids[0]) {
		t.Fatalf("POST arrived as %s %s, headers %v, body %q", r.Method, r.URL, r.Header, body)
	}
	r, body = got.get(1)
	if r.Method != "PUT" || !bytes.Equal(body, binary) || r.Header.Get("Content-Type") != "application/octet-stream" ||
		r.Header.Get("Idempotency-Key") != "blob-7" {
		t.Fatalf("PUT arrived as %s, headers %v, body %q; want the bytes and the request's own Idempotency-Key", r.Method, r.Header, body)
	}
}

func TestSecretHeaderIsResolvedAtRunTimeAndNotStored(t *testing.T) {
	t.Parallel()
	const token = "Bearer s3cr3t-t0ken"
	var got seen
	server := serve(t, func(w http.ResponseWriter, r *http.Request) { got.record(r) })
	var flaky atomic.Int32
	resolve := func(ctx context.Context, name string) (string, error) {
		switch name {
		case "orders-token":
			return token, nil
		case "vault-down-once":
			if flaky.Add(1) == 1 {
				return "", errors.New("vault: connection refused")
			}
			return "k-2", nil
		}
		return "", fmt.Errorf("%w %q", httptask.ErrUnknownSecret, name)
	}
	pool := start(t, local(httptask.Config{Secrets: resolve}), runtime.ModeLease)

	id := enqueue(t, pool, httptask.Request{
		Method:        "POST",
		URL:           server.URL,
		Headers:       map[string]string{"Authorization": "placeholder"},
		SecretHeaders: map[string]string{"Authorization": "orders-token"},
	})
	result(t, pool, id)
	if r, _ := got.get(0); r.Header.Get("Authorization") != token {
		t.Fatalf("server got Authorization %q, want the secret's value", r.Header.Get("Authorization"))
	}
	info, err := runtime.GetJob(context.Background(), pool, id)
	if err != nil {
		t.Fatal(err)
	}
	var payload httptask.Request
	if err := json.Unmarshal(info.Payload, &payload); err != nil {
		t.Fatal(err)
	}
	stored := fmt.Sprintf("%s %s %+v", info.Payload, info.Result, info.Errors)
	if strings.Contains(stored, "s3cr3t") || payload.SecretHeaders["Authorization"] != "orders-token" {
		t.Fatalf("the job stores %s; want the secret's name only", stored)
	}

	// A resolver that fails for another reason than an unknown name is
	// tried again with the next attempt.
	retried := enqueue(t, pool, httptask.Request{Method: "GET", URL: server.URL, SecretHeaders: map[string]string{"X-Api-Key": "vault-down-once"}})
	result(t, pool, retried)
	info, err = runtime.GetJob(context.Background(), pool, retried)
	if err != nil {
		t.Fatal(err)
	}
	if info.Attempts != 2 || !strings.Contains(info.Errors[0].Error, `header X-Api-Key: resolve the secret "vault-down-once": vault: connection refused`) {
		t.Fatalf("after a resolver error: %d attempts, errors %+v; want a retry that succeeded", info.Attempts, info.Errors)
	}
}

// lockedBuffer is a log's output, written by the worker's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// echo writes what a careless receiver shows of a request: its headers as
// lines, as JSON and as a form, and its bearer token on its own.
func echo(w io.Writer, r *http.Request) {
	for name, values := range r.Header {
		fmt.Fprintf(w, "%s: %s\n", name, strings.Join(values, ", "))
	}
	j, _ := json.Marshal(r.Header)
	fmt.Fprintf(w, "%s\n", j)
	form := url.Values{}
	for name, values := range r.Header {
		form[name] = values
	}
	fmt.Fprintf(w, "%s\n", form.Encode())
	if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		fmt.Fprintf(w, "invalid token %s\n", token)
	}
}

// A receiver that echoes the request's secrets back, in an error's body,
// a success's body or a kept header, has them stored and logged redacted.
func TestEchoedSecretsAreRedacted(t *testing.T) {
	t.Parallel()
	secrets := map[string]string{
		"orders-token": "Bearer s3cr3t-t0ken-one",
		"api-key":      `k<ey>&"sec0nd"\two`,
	}
	// Each secret's core, which no escaping changes.
	cores := []string{"s3cr3t-t0ken-one", "sec0nd", "pa55w0rd-three", "c2hvcDpwYTU1dzByZC10aHJlZQ"}
	var calls atomic.Int32
	server := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", r.Header.Get("X-Api-Key"))
		w.Header().Set("Content-Type", "text/plain")
		if calls.Add(1)%2 == 1 {
			w.WriteHeader(http.StatusInternalServerError)
		}
		echo(w, r)
	})
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	pool := startLogged(t, local(httptask.Config{Secrets: httptask.StaticSecrets(secrets)}), runtime.ModeLease, log)

	headers := enqueue(t, pool, httptask.Request{
		Method:        "POST",
		URL:           server.URL + "/hook",
		SecretHeaders: map[string]string{"Authorization": "orders-token", "X-Api-Key": "api-key"},
	}, runtime.WithGroup("one-at-a-time"))
	u, err := url.Parse(server.URL + "/basic")
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("shop", "pa55w0rd-three")
	basic := enqueue(t, pool, httptask.Request{Method: "GET", URL: u.String()}, runtime.WithGroup("one-at-a-time"))

	for _, id := range []runtime.JobID{headers, basic} {
		resp := result(t, pool, id)
		info := waitFinished(t, pool, id)
		if info.Attempts != 2 || len(info.Errors) != 1 || !strings.Contains(info.Errors[0].Error, "answered 500 Internal Server Error: ") {
			t.Fatalf("job %d: %d attempts, errors %+v; want a 500, then a success", id, info.Attempts, info.Errors)
		}
		if !strings.Contains(resp.Body, "[REDACTED]") || !strings.Contains(info.Errors[0].Error, "[REDACTED]") {
			t.Errorf("job %d: result body %q, error %q; want the echoed secret shown as [REDACTED]", id, resp.Body, info.Errors[0].Error)
		}
		stored := fmt.Sprintf("%s %+v", info.Result, info.Errors)
		for _, core := range cores {
			if strings.Contains(stored, core) {
				t.Errorf("job %d stores the secret %q: %s", id, core, stored)
			}
		}
	}
	// The receiver saw the secrets: they were sent.
	if calls.Load() != 4 {
		t.Fatalf("%d calls, want 4", calls.Load())
	}
	if !strings.Contains(logs.String(), "job attempt failed") {
		t.Fatalf("the failed attempts were not logged: %s", logs.String())
	}
	for _, core := range cores {
		if strings.Contains(logs.String(), core) {
			t.Errorf("the log shows the secret %q: %s", core, logs.String())
		}
	}
}

func TestUnknownSecretFailsWithoutRetry(t *testing.T) {
	t.Parallel()
	var got seen
	server := serve(t, func(w http.ResponseWriter, r *http.Request) { got.record(r) })
	pool := start(t, local(httptask.Config{Secrets: httptask.StaticSecrets(map[string]string{"known": "v"})}), runtime.ModeLease)
	id := enqueue(t, pool, httptask.Request{Method: "GET", URL: server.URL, SecretHeaders: map[string]string{"X-Api-Key": "missing"}})
	requireFailedAtOnce(t, pool, id, `header X-Api-Key: httptask: unknown secret "missing"`)
	if got.count() != 0 {
		t.Fatal("the call was made without its secret")
	}
}

func TestNoResolverFailsWithoutRetry(t *testing.T) {
	t.Parallel()
	server := serve(t, func(w http.ResponseWriter, r *http.Request) {})
	pool := start(t, local(httptask.Config{}), runtime.ModeLease)
	id := enqueue(t, pool, httptask.Request{Method: "GET", URL: server.URL, SecretHeaders: map[string]string{"X-Api-Key": "k"}})
	requireFailedAtOnce(t, pool, id, "the handler has no SecretResolver: set httptask.Config.Secrets")
}

func TestServerErrorIsRetried(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	server := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			http.Error(w, "database\nis down", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "ok")
	})
	pool := start(t, local(httptask.Config{}), runtime.ModeLease)
	id := enqueue(t, pool, httptask.Request{Method: "POST", URL: server.URL + "/hook", Body: "x"})
	resp := result(t, pool, id)
	info := waitFinished(t, pool, id)
	want := fmt.Sprintf("POST %s/hook answered 500 Internal Server Error: database is down", server.URL)
	if resp.Body != "ok" || info.Attempts != 2 || len(info.Errors) != 1 || info.Errors[0].Error != want {
		t.Fatalf("result %+v after %d attempts, errors %+v; want ok on the second, after %q", resp, info.Attempts, info.Errors, want)
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	server := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/seconds":
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/date":
			w.Header().Set("Retry-After", time.Now().Add(300*time.Second).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	pool := start(t, local(httptask.Config{}), runtime.ModeLease)
	for path, want := range map[string]time.Duration{"/seconds": 120 * time.Second, "/date": 300 * time.Second} {
		id := enqueue(t, pool, httptask.Request{Method: "GET", URL: server.URL + path})
		info := waitFailures(t, pool, id, 1)
		// The date has whole seconds: up to one less than asked.
		wait := info.RunAfter.Sub(info.Errors[0].At)
		if info.Status != runtime.StatusScheduled || wait < want-1100*time.Millisecond || wait > want+100*time.Millisecond {
			t.Errorf("%s: %s, next attempt %s after the failure; want scheduled about %s later (error %q)", path, info.Status, wait, want, info.Errors[0].Error)
		}
		if !strings.Contains(info.Errors[0].Error, "as its Retry-After asks") {
			t.Errorf("%s: error %q does not say it honours Retry-After", path, info.Errors[0].Error)
		}
	}
}

func TestClientErrorIsFinal(t *testing.T) {
	t.Parallel()
	server := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1") // not a reason to retry a 404
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":"no such hook"}`)
	})
	pool := start(t, local(httptask.Config{}), runtime.ModeLease)
	id := enqueue(t, pool, httptask.Request{Method: "DELETE", URL: server.URL + "/hooks/9"})
	requireFailedAtOnce(t, pool, id, "DELETE "+server.URL+`/hooks/9 answered 404 Not Found: {"error":"no such hook"}`)
}

func TestSlowServerTimesOutAndIsRetried(t *testing.T) {
	t.Parallel()
	server := serve(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	pool := start(t, local(httptask.Config{}), runtime.ModeLease)
	id := enqueue(t, pool, httptask.Request{Method: "GET", URL: server.URL, Timeout: 200 * time.Millisecond})
	began := time.Now()
	info := waitFailures(t, pool, id, 1)
	if info.Status.Finished() || !strings.Contains(info.Errors[0].Error, "no answer within the call's timeout of 200ms") {
		t.Fatalf("%s, errors %+v; want a timeout, to be retried", info.Status, info.Errors)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the timeout took %s to be recorded", took)
	}
	if _, err := runtime.CancelJob(context.Background(), pool, id); err != nil {
		t.Fatal(err)
	}
}

func TestRedirectsAreFollowedWithoutCarryingSecretsAway(t *testing.T) {
	t.Parallel()
	var other seen
	elsewhere := serve(t, func(w http.ResponseWriter, r *http.Request) {
		other.record(r)
		fmt.Fprint(w, "landed")
	})
	var home seen
	server := serve(t, func(w http.ResponseWriter, r *http.Request) {
		home.record(r)
		switch r.URL.Path {
		case "/a":
			http.Redirect(w, r, "/b", http.StatusFound)
		case "/b":
			http.Redirect(w, r, "/c", http.StatusTemporaryRedirect)
		case "/c":
			fmt.Fprint(w, "end of the chain")
		case "/away":
			http.Redirect(w, r, elsewhere.URL+"/land", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		}
	})
	pool := start(t, local(httptask.Config{Secrets: httptask.StaticSecrets(map[string]string{"k": "key-value"})}), runtime.ModeLease)
	secret := map[string]string{"X-Api-Key": "k"}

	resp := result(t, pool, enqueue(t, pool, httptask.Request{Method: "GET", URL: server.URL + "/a", SecretHeaders: secret}))
	if resp.Status != 200 || resp.URL != server.URL+"/c" || resp.Body != "end of the chain" {
		t.Fatalf("after the chain: %+v", resp)
	}
	if r, _ := home.get(2); r.URL.Path != "/c" || r.Header.Get("X-Api-Key") != "key-value" {
		t.Fatalf("the chain's end got %s with X-Api-Key %q; same host, so the secret goes along", r.URL.Path, r.Header.Get("X-Api-Key"))
	}

	resp = result(t, pool, enqueue(t, pool, httptask.Request{Method: "GET", URL: server.URL + "/away", SecretHeaders: secret}))
	if resp.URL != elsewhere.URL+"/land" || resp.Body != "landed" {
		t.Fatalf("after the redirect away: %+v", resp)
	}
	if r, _ := other.get(0); r.Header.Get("X-Api-Key") != "" {
		t.Fatal("the secret header went to another host")
	}

	loop := enqueue(t, pool, httptask.Request{Method: "GET", URL: server.URL + "/loop"})
	requireFailedAtOnce(t, pool, loop, "too many redirects: stopped after 10")
}

func TestRedirectsNotFollowedAreTheResult(t *testing.T) {
	t.Parallel()
	server := serve(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusMovedPermanently)
	})
	pool := start(t, local(httptask.Config{MaxRedirects: -1, MaxResponseBytes: -1}), runtime.ModeLease)
	resp := result(t, pool, enqueue(t, pool, httptask.Request{Method: "GET", URL: server.URL + "/old"}))
	if resp.Status != http.StatusMovedPermanently || resp.Headers["Location"] != "/elsewhere" || resp.Body != "" || resp.BodyBase64 != nil {
		t.Fatalf("result %+v; want the 301 with its Location and no body kept", resp)
	}
}

func TestLargeBodyIsCapped(t *testing.T) {
	t.Parallel()
	server := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/large":
			w.Header().Set("Content-Length", "102400")
			w.Write(bytes.Repeat([]byte("a"), 100<<10))
		case "/binary":
			w.Write([]byte{0x89, 'P', 'N', 'G', 0, 0})
		}
	})
	pool := start(t, local(httptask.Config{}), runtime.ModeLease)
	resp := result(t, pool, enqueue(t, pool, httptask.Request{Method: "GET", URL: server.URL + "/large"}))
	if len(resp.Body) != httptask.DefaultMaxResponseBytes || !resp.Truncated || resp.Headers["Content-Length"] != "102400" {
		t.Fatalf("kept %d bytes, truncated %v, headers %v; want %d, truncated, the full length in Content-Length", len(resp.Body), resp.Truncated, resp.Headers, httptask.DefaultMaxResponseBytes)
	}
	resp = result(t, pool, enqueue(t, pool, httptask.Request{Method: "GET", URL: server.URL + "/binary"}))
	if resp.Body != "" || !bytes.Equal(resp.Bytes(), []byte{0x89, 'P', 'N', 'G', 0, 0}) || resp.Truncated {
		t.Fatalf("binary body kept as %+v; want its bytes in BodyBase64", resp)
	}
}

func TestPrivateAddressesAreRefusedByDefault(t *testing.T) {
	t.Parallel()
	var got seen
	server := serve(t, func(w http.ResponseWriter, r *http.Request) { got.record(r) })
	pool := start(t, httptask.Config{}, runtime.ModeLease)
	id := enqueue(t, pool, httptask.Request{Method: "GET", URL: server.URL})
	requireFailedAtOnce(t, pool, id, "refused to connect to 127.0.0.1", "set httptask.Config.AllowPrivate")
	if got.count() != 0 {
		t.Fatal("the private address was called")
	}
}

func TestSignedRequestVerifies(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef0123456789abcdef")
	var got seen
	verified := make(chan error, 1)
	server := serve(t, func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		err := httptask.Verify(r, key, time.Minute)
		got.record(r) // Verify left the body to read
		verified <- err
	})
	pool := start(t, local(httptask.Config{SigningKey: key}), runtime.ModeLease)
	id := enqueue(t, pool, httptask.Request{Method: "POST", URL: server.URL, Body: `{"paid":true}`})
	result(t, pool, id)
	if err := <-verified; err != nil {
		t.Fatalf("the receiver's Verify: %v", err)
	}
	r, body := got.get(0)
	if string(body) != `{"paid":true}` || !strings.HasPrefix(r.Header.Get(httptask.SignatureHeader), "v1=") {
		t.Fatalf("received body %q, signature %q", body, r.Header.Get(httptask.SignatureHeader))
	}

	// The same request, replayed with a change, does not verify.
	replay := func(change func(*http.Request, *[]byte)) error {
		req := httptest.NewRequest("POST", "/", nil)
		req.Header = r.Header.Clone()
		b := bytes.Clone(body)
		change(req, &b)
		req.Body = io.NopCloser(bytes.NewReader(b))
		return httptask.Verify(req, key, time.Minute)
	}
	if err := replay(func(*http.Request, *[]byte) {}); err != nil {
		t.Fatalf("an unchanged copy does not verify: %v", err)
	}
	for name, change := range map[string]func(*http.Request, *[]byte){
		"tampered body":    func(_ *http.Request, b *[]byte) { *b = []byte(`{"paid":false}`) },
		"other timestamp":  func(r *http.Request, _ *[]byte) { r.Header.Set(httptask.TimestampHeader, "1") },
		"other idem key":   func(r *http.Request, _ *[]byte) { r.Header.Set("Idempotency-Key", "pgtask-999999") },
		"no signature":     func(r *http.Request, _ *[]byte) { r.Header.Del(httptask.SignatureHeader) },
		"forged signature": func(r *http.Request, _ *[]byte) { r.Header.Set(httptask.SignatureHeader, "v1=00") },
	} {
		if err := replay(change); !errors.Is(err, httptask.ErrInvalidSignature) {
			t.Errorf("%s: Verify = %v, want ErrInvalidSignature", name, err)
		}
	}
	req := httptest.NewRequest("POST", "/", bytes.NewReader(body))
	req.Header = r.Header.Clone()
	if err := httptask.Verify(req, []byte("another key, 32 bytes long......"), time.Minute); !errors.Is(err, httptask.ErrInvalidSignature) {
		t.Errorf("wrong key: Verify = %v, want ErrInvalidSignature", err)
	}
}

func TestHandleRefusesABadConfig(t *testing.T) {
	t.Parallel()
	url := pgtasktest.NewDatabase(t)
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	w, err := runtime.NewWorker(context.Background(), pc, runtime.Config{Queues: map[string]runtime.QueueConfig{"http": {}}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for cfg, want := range map[*httptask.Config]string{
		{SigningKey: []byte("short")}:                               "Config.SigningKey is 5 bytes, fewer than 16: use 32 random bytes",
		{MaxResponseBytes: httptask.MaxResponseLimit + 1}:           "Config.MaxResponseBytes is 1048577, more than the 1048576 a result can hold",
		{SigningKey: bytes.Repeat([]byte("k"), 16), UserAgent: "x"}: "",
	} {
		err := httptask.Handle(w, *cfg)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("Handle(%+v) = %v, want %q", *cfg, err, want)
		}
	}
}

func TestInvalidRequestsAreRefusedAtEnqueue(t *testing.T) {
	t.Parallel()
	pool := pgtasktest.NewPool(t)
	ctx := context.Background()
	ok := httptask.Request{Method: "GET", URL: "https://example.com/x"}
	for _, c := range []struct {
		want   string
		change func(*httptask.Request)
	}{
		{"url fails http_url", func(r *httptask.Request) { r.URL = "ftp://example.com/x" }},
		{"url fails http_url", func(r *httptask.Request) { r.URL = "/relative/path" }},
		{"url fails http_url", func(r *httptask.Request) { r.URL = "not a url" }},
		{"url fails required", func(r *httptask.Request) { r.URL = "" }},
		{"method fails oneof", func(r *httptask.Request) { r.Method = "FETCH" }},
		{"method fails oneof", func(r *httptask.Request) { r.Method = "post" }},
		{"method fails required", func(r *httptask.Request) { r.Method = "" }},
		{"headers[Bad Name] fails excludesall", func(r *httptask.Request) { r.Headers = map[string]string{"Bad Name": "v"} }},
		{"headers[X-A:] fails excludesall", func(r *httptask.Request) { r.Headers = map[string]string{"X-A:": "v"} }},
		{"headers[X-Ok] fails excludesall", func(r *httptask.Request) { r.Headers = map[string]string{"X-Ok": "v\r\nInjected: 1"} }},
		{"secret_headers[X-K] fails required", func(r *httptask.Request) { r.SecretHeaders = map[string]string{"X-K": ""} }},
		{"body_base64 fails excluded_with", func(r *httptask.Request) { r.Body, r.BodyBase64 = "text", []byte("bytes") }},
		{"timeout fails lte", func(r *httptask.Request) { r.Timeout = 2 * time.Minute }},
		{"timeout fails gte", func(r *httptask.Request) { r.Timeout = -time.Second }},
	} {
		r := ok
		c.change(&r)
		_, err := httptask.EnqueueRequest(ctx, pool, r)
		var ve *runtime.ValidationError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("EnqueueRequest(%+v) = %v; want a validation error with %q", r, err, c.want)
		}
	}
	bad := ok
	bad.Method = "TRACE"
	if _, err := httptask.EnqueueRequestMany(ctx, pool, []httptask.Request{ok, bad}); err == nil {
		t.Fatal("a batch with an invalid request was enqueued")
	}
	n, err := runtime.CountJobs(ctx, pool, runtime.JobFilter{})
	if err != nil || n != 0 {
		t.Fatalf("%d jobs (%v) after refused enqueues, want none", n, err)
	}
	if _, err := httptask.EnqueueRequest(ctx, pool, ok); err != nil {
		t.Fatalf("the valid request: %v", err)
	}
}
