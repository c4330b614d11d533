package httptask

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"time"

	"github.com/pgtask/pgtask/runtime"
)

//go:generate go run github.com/pgtask/pgtask/cmd/pgtask gen

// Request is an HTTP call to make in the background: a task, enqueued with
// the generated EnqueueRequest (or EnqueueRequestMany) and worked by the
// handler Handle registers. Its jobs go to the queue "http", so a worker
// must serve that queue; pass runtime.WithQueue to send them elsewhere and
// runtime.WithGroup to make calls that share a key run one at a time, in
// order.
//
// Every field is checked before anything is inserted. A secret (a token, a
// password) does not belong in a Request: the payload is stored as it is.
// Name it in SecretHeaders instead, and give Handle a SecretResolver.
type Request struct {
	runtime.TaskWithResult[Response] `task:"pgtask.http,queue=http,max_attempts=15,timeout=90s,backoff=1s..1h"`

	// Method is GET, POST, PUT, PATCH, DELETE or HEAD.
	Method string `json:"method" validate:"required,oneof=GET POST PUT PATCH DELETE HEAD"`
	// URL is an absolute http or https URL.
	URL string `json:"url" validate:"required,max=8192,http_url"`
	// Headers are sent as given, one value each. They override the
	// handler's User-Agent and Idempotency-Key.
	Headers map[string]string `json:"headers,omitempty" validate:"max=100,dive,keys,required,max=256,printascii,excludesall= ()<>@0x2C;:\"/[]?={}\\,endkeys,max=8192,excludesall=\r\n\x00"`
	// SecretHeaders maps a header to the name of a secret: the handler's
	// SecretResolver turns the name into the header's value when the
	// request is sent, so the value is never stored. A secret header
	// replaces a plain one of the same name.
	SecretHeaders map[string]string `json:"secret_headers,omitempty" validate:"max=100,dive,keys,required,max=256,printascii,excludesall= ()<>@0x2C;:\"/[]?={}\\,endkeys,required,max=256,printascii"`
	// Body is the request's body as text (JSON, a form, XML). WithJSON
	// sets it from a value.
	Body string `json:"body,omitempty"`
	// BodyBase64 is a binary body, stored base64-encoded. At most one of
	// Body and BodyBase64 may be set.
	BodyBase64 []byte `json:"body_base64,omitempty" validate:"excluded_with=Body"`
	// Timeout bounds the call, from sending the request to reading the
	// response's body. Zero means DefaultTimeout; at most MaxTimeout. It is
	// stored in nanoseconds.
	Timeout time.Duration `json:"timeout,omitempty" validate:"gte=0,lte=1m"`
}

const (
	// DefaultTimeout bounds a call whose Request has no Timeout.
	DefaultTimeout = 30 * time.Second
	// MaxTimeout is the longest Timeout a Request may have: an attempt
	// of the task has 90 seconds in all, secrets included.
	MaxTimeout = time.Minute
)

// WithJSON returns a copy of r whose Body is v encoded as JSON, with the
// header Content-Type: application/json unless r sets a Content-Type.
func (r Request) WithJSON(v any) (Request, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return r, fmt.Errorf("httptask: encode the body as JSON: %w", err)
	}
	r.Body, r.BodyBase64 = string(b), nil
	headers := make(map[string]string, len(r.Headers)+1)
	maps.Copy(headers, r.Headers)
	for name := range headers {
		if http.CanonicalHeaderKey(name) == "Content-Type" {
			r.Headers = headers
			return r, nil
		}
	}
	headers["Content-Type"] = "application/json"
	r.Headers = headers
	return r, nil
}

// body is the request's body as sent.
func (r Request) body() []byte {
	if r.BodyBase64 != nil {
		return r.BodyBase64
	}
	return []byte(r.Body)
}

// timeout is the call's bound.
func (r Request) timeout() time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return DefaultTimeout
}

// Response is what a Request's job stores when it succeeds (read it back
// with the generated GetRequestResult): the final response, after the
// redirects the handler followed.
type Response struct {
	// Status is the response's status code: a 2xx, or a 3xx that was not
	// followed.
	Status int `json:"status"`
	// URL is the URL that answered, after redirects.
	URL string `json:"url"`
	// Headers are the response headers the handler keeps
	// (Config.ResponseHeaders), several values joined by ", ".
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the response's body when it is text (valid UTF-8 without NUL
	// characters); BodyBase64 holds any other body. Both are empty when
	// the handler keeps no body.
	Body       string `json:"body,omitempty"`
	BodyBase64 []byte `json:"body_base64,omitempty"`
	// Truncated says the stored body is not all of it: it was longer than
	// Config.MaxResponseBytes, or reading it failed after the status
	// arrived.
	Truncated bool `json:"truncated,omitempty"`
}

// Bytes returns the stored body, whichever field holds it.
func (r Response) Bytes() []byte {
	if r.BodyBase64 != nil {
		return r.BodyBase64
	}
	return []byte(r.Body)
}
