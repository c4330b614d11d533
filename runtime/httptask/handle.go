package httptask

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/taskspec"
)

// Config configures the handler Handle registers. The zero value works:
// it calls public addresses only, keeps 64 KiB of each response's body and
// signs nothing.
type Config struct {
	// Client makes the calls. Default: a client that refuses to connect
	// to private addresses (see AllowPrivate) and uses no proxy. Its
	// redirects are limited by MaxRedirects in either case.
	Client *http.Client
	// AllowPrivate lets the default client call loopback, private,
	// link-local, shared (100.64.0.0/10), multicast and other
	// special-purpose addresses that are not globally reachable (IPv6
	// ones that embed such an IPv4 address among them: IPv4-mapped,
	// NAT64, 6to4, Teredo), and use the proxy the environment names. Without it such a call fails
	// without retry, so that a URL taken from a user cannot reach the
	// service's own network. It has no effect on a Client you give:
	// that client's transport connects wherever it is asked to.
	AllowPrivate bool
	// Secrets resolves the secrets Requests name in SecretHeaders. A
	// Request that names one while Secrets is nil fails without retry.
	Secrets SecretResolver
	// SigningKey, when set, signs every request: the handler adds the
	// headers TimestampHeader and SignatureHeader, which receivers check
	// with Verify. At least 16 bytes; use 32 random ones.
	SigningKey []byte
	// MaxResponseBytes is how much of a response's body the result
	// keeps. Default 64 KiB, at most MaxResponseLimit; negative keeps
	// none. Error messages show the first 512 bytes either way.
	MaxResponseBytes int
	// ResponseHeaders are the response headers kept in the result.
	// Default: Content-Type, Content-Length, Location and ETag.
	ResponseHeaders []string
	// UserAgent is the User-Agent header, unless a Request sets one.
	// Default "pgtask-http".
	UserAgent string
	// MaxRedirects is how many redirects a call follows; one more fails
	// the job without retry. Default 10; negative follows none, and a 3xx
	// answer is then the result.
	MaxRedirects int
}

const (
	// DefaultMaxResponseBytes is how much of a body is kept by default.
	DefaultMaxResponseBytes = 64 << 10
	// MaxResponseLimit is the most Config.MaxResponseBytes may keep: a
	// kept body, however escaped or encoded, stays well within the
	// largest result a job can store (runtime.MaxResultBytes).
	MaxResponseLimit = 1 << 20
	// DefaultMaxRedirects is how many redirects a call follows by default.
	DefaultMaxRedirects = 10
	// MaxRetryAfter caps the wait a Retry-After header asks for.
	MaxRetryAfter = 24 * time.Hour
)

// handlerSpec is the task's settings as the generated requestSpec has them
// from Request's tag. Handle cannot name the generated code: the generator
// type-checks this package without it. TestHandlerSpecMatchesTheTag keeps
// the two the same.
var handlerSpec = &taskspec.Spec[Request]{
	Kind: "pgtask.http",
	Defaults: runtime.EnqueueOptions{
		Queue:       "http",
		MaxAttempts: 15,
	},
	Timeout: 90 * time.Second,
	Backoff: runtime.Backoff{Min: time.Second, Max: time.Hour},
}

// Handle registers the handler of Request jobs on w. For each job it
// resolves the secret headers, signs the request if cfg has a SigningKey,
// adds the header Idempotency-Key: pgtask-<job id> (unless the Request sets
// one), makes the call with the Request's Timeout and stores the answer as
// the job's Response. A 2xx answer, or a 3xx that is not followed,
// succeeds. A network error, a timeout, 408, 425, 429 or a 5xx fails the
// attempt, to be retried after the task's backoff or the answer's
// Retry-After; any other answer fails the job at once. The error of a
// failed attempt holds the status and the start of the body.
func Handle(w *runtime.Worker, cfg Config) error {
	c, err := newCaller(cfg)
	if err != nil {
		return fmt.Errorf("httptask: %w", err)
	}
	return taskspec.HandleWithResult(w, handlerSpec, c.call)
}

// caller makes the calls of one handler.
type caller struct {
	client          *http.Client
	secrets         SecretResolver
	key             []byte
	maxBody         int
	responseHeaders []string
	userAgent       string
}

// newCaller checks cfg and fills in its defaults.
func newCaller(cfg Config) (*caller, error) {
	if cfg.SigningKey != nil && len(cfg.SigningKey) < minKeyBytes {
		return nil, fmt.Errorf("Config.SigningKey is %d bytes, fewer than %d: use 32 random bytes", len(cfg.SigningKey), minKeyBytes)
	}
	if cfg.MaxResponseBytes > MaxResponseLimit {
		return nil, fmt.Errorf("Config.MaxResponseBytes is %d, more than the %d a result can hold: store large bodies elsewhere", cfg.MaxResponseBytes, MaxResponseLimit)
	}
	c := &caller{
		client:          cfg.Client,
		secrets:         cfg.Secrets,
		key:             bytes.Clone(cfg.SigningKey),
		maxBody:         cmp.Or(cfg.MaxResponseBytes, DefaultMaxResponseBytes),
		responseHeaders: slices.Clone(cfg.ResponseHeaders),
		userAgent:       cmp.Or(cfg.UserAgent, "pgtask-http"),
	}
	if c.client == nil {
		c.client = defaultClient(cfg.AllowPrivate)
	}
	c.client = withRedirectPolicy(c.client, cmp.Or(cfg.MaxRedirects, DefaultMaxRedirects))
	if c.responseHeaders == nil {
		c.responseHeaders = []string{"Content-Type", "Content-Length", "Location", "ETag"}
	}
	return c, nil
}

// call makes r's call for job. Its errors are runtime.NoRetry when another
// attempt cannot succeed.
func (c *caller) call(ctx context.Context, job *runtime.Job, r Request) (Response, error) {
	req, secrets, err := c.newRequest(ctx, job, r)
	if err != nil {
		return Response{}, err
	}
	// The timeout starts once the secrets are resolved.
	ctx, cancel := context.WithTimeout(req.Context(), r.timeout())
	defer cancel()
	resp, err := c.client.Do(req.WithContext(ctx))
	if err != nil {
		return Response{}, sendError(ctx, r, err, secrets)
	}
	defer resp.Body.Close()
	out, shown := c.read(resp, secrets)
	return out, answerError(resp, shown, secrets)
}

// newRequest builds r's request, with its headers resolved and signed, and
// the redactor of the secrets it sends.
func (c *caller) newRequest(ctx context.Context, job *runtime.Job, r Request) (*http.Request, *redactor, error) {
	req, values, err := c.buildRequest(ctx, job, r)
	if err != nil {
		return nil, nil, err
	}
	return req, newRedactor(append(values, urlSecrets(req.URL)...)...), nil
}

// buildRequest builds r's request and returns the secret values it sends
// in its headers.
func (c *caller) buildRequest(ctx context.Context, job *runtime.Job, r Request) (*http.Request, []string, error) {
	secretNames := slices.Sorted(maps.Keys(r.SecretHeaders))
	ctx = context.WithValue(ctx, secretHeadersKey{}, secretNames)
	body := r.body()
	req, err := http.NewRequestWithContext(ctx, r.Method, r.URL, bytes.NewReader(body))
	if err != nil {
		// A URL's parse error quotes it whole, password included.
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = fmt.Errorf("the URL does not parse: %w", ue.Err)
		}
		return nil, nil, runtime.NoRetry(fmt.Errorf("build the request: %w", err))
	}
	req.Header.Set("User-Agent", c.userAgent)
	req.Header.Set(IdempotencyHeader, "pgtask-"+strconv.FormatInt(int64(job.ID), 10))
	for _, name := range slices.Sorted(maps.Keys(r.Headers)) {
		if err := checkHeader(name, r.Headers[name]); err != nil {
			return nil, nil, runtime.NoRetry(err)
		}
		req.Header.Set(name, r.Headers[name])
	}
	values := make([]string, 0, len(secretNames))
	for _, name := range secretNames {
		value, err := c.secret(ctx, name, r.SecretHeaders[name])
		if err != nil {
			return nil, nil, err
		}
		if err := checkHeader(name, value); err != nil {
			return nil, nil, runtime.NoRetry(fmt.Errorf("secret %q: %w", r.SecretHeaders[name], err))
		}
		req.Header.Set(name, value)
		values = append(values, value)
	}
	if c.key != nil {
		ts := time.Now().Unix()
		req.Header.Set(TimestampHeader, strconv.FormatInt(ts, 10))
		req.Header.Set(SignatureHeader, sign(c.key, req.Header.Get(IdempotencyHeader), ts, body))
	}
	return req, values, nil
}

// secret resolves the secret name for header.
func (c *caller) secret(ctx context.Context, header, name string) (string, error) {
	if c.secrets == nil {
		return "", runtime.NoRetry(fmt.Errorf("header %s names the secret %q, but the handler has no SecretResolver: set httptask.Config.Secrets", header, name))
	}
	value, err := c.secrets(ctx, name)
	switch {
	case errors.Is(err, ErrUnknownSecret):
		return "", runtime.NoRetry(fmt.Errorf("header %s: %w", header, err))
	case err != nil:
		return "", fmt.Errorf("header %s: resolve the secret %q: %w", header, name, err)
	}
	return value, nil
}

// checkHeader refuses what net/http would refuse to send. It never shows
// the value, which may be a secret.
func checkHeader(name, value string) error {
	if name == "" {
		return errors.New("a header name is empty")
	}
	for i := 0; i < len(name); i++ {
		if !tokenByte(name[i]) {
			return fmt.Errorf("header name %q holds %q, which a header name cannot", name, name[i])
		}
	}
	for i := 0; i < len(value); i++ {
		if b := value[i]; b < ' ' && b != '\t' || b == 0x7f {
			return fmt.Errorf("header %s: its value holds a control character (%#02x), which a header cannot carry", name, b)
		}
	}
	return nil
}

// tokenByte reports whether b may appear in a header name (RFC 9110 token).
func tokenByte(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	return bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), b) >= 0
}
