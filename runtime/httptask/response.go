package httptask

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgtask/pgtask/runtime"
)

// snippetBytes is how much of a body an error message shows.
const snippetBytes = 512

// read reads what the handler keeps of resp: its status, final URL,
// selected headers and up to maxBody bytes of its body, with the secrets
// the call sent hidden. It also returns the start of the body as error
// messages show it.
func (c *caller) read(resp *http.Response, secrets *redactor) (Response, string) {
	out := Response{Status: resp.StatusCode, URL: secrets.string(resp.Request.URL.Redacted())}
	for _, name := range c.responseHeaders {
		if values := resp.Header.Values(name); len(values) > 0 {
			if out.Headers == nil {
				out.Headers = map[string]string{}
			}
			out.Headers[http.CanonicalHeaderKey(name)] = secrets.string(strings.ReplaceAll(strings.Join(values, ", "), "\x00", ""))
		}
	}
	// Errors show the start of the body even when none is kept.
	body, truncated := readCapped(resp.Body, max(c.maxBody, snippetBytes))
	body = secrets.bytes(body, truncated)
	if c.maxBody >= 0 {
		kept, cut := body, truncated
		if len(kept) > c.maxBody {
			kept, cut = kept[:c.maxBody], true
		}
		setBody(&out, kept, cut)
	}
	return out, showBody(body, truncated)
}

// readCapped reads up to limit bytes of r. truncated says there was more,
// or that reading failed.
func readCapped(r io.Reader, limit int) (body []byte, truncated bool) {
	body, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if len(body) > limit {
		return body[:limit], true
	}
	return body, err != nil
}

// setBody stores body as text when it is text, else as bytes. A cut body
// may end inside a character; that end is left out of a text body.
func setBody(out *Response, body []byte, truncated bool) {
	out.Truncated = truncated
	text := body
	if truncated {
		for i := 0; i < utf8.UTFMax-1 && len(text) > 0 && !utf8.Valid(text); i++ {
			text = text[:len(text)-1]
		}
	}
	if utf8.Valid(text) && bytes.IndexByte(text, 0) < 0 {
		out.Body = string(text)
		return
	}
	out.BodyBase64 = body
}

// retryable reports whether another attempt may get another answer.
func retryable(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return status >= 500
}

// answerError is the error of an answer that is not a success, shown its
// body's start (secrets hidden already): retryable (after its Retry-After,
// if it has one) or final. nil for a success.
func answerError(resp *http.Response, shown string, secrets *redactor) error {
	if resp.StatusCode < 400 && resp.StatusCode >= 200 {
		return nil
	}
	// The status line and a redirect's URL are the receiver's to write.
	err := errors.New(secrets.string(fmt.Sprintf("%s %s answered %s", resp.Request.Method, resp.Request.URL.Redacted(), resp.Status)) + shown)
	if !retryable(resp.StatusCode) {
		return runtime.NoRetry(err)
	}
	if delay, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
		return runtime.RetryAfter(delay, fmt.Errorf("%w; retrying after %s, as its Retry-After asks", err, delay))
	}
	return err
}

// showBody formats the start of a body for an error message, on one line:
// ": " and up to snippetBytes of it, or nothing for an empty body.
func showBody(body []byte, truncated bool) string {
	if len(body) > snippetBytes {
		body, truncated = body[:snippetBytes], true
	}
	text := strings.ToValidUTF8(string(body), "\uFFFD")
	text = strings.Join(strings.FieldsFunc(text, func(r rune) bool { return r < ' ' || r == 0x7f }), " ")
	if text = strings.TrimSpace(text); text == "" {
		return ""
	}
	if truncated {
		text += "…"
	}
	return ": " + text
}

// retryAfter reads a Retry-After header: a number of seconds or an HTTP
// date, relative to now. A date in the past means at once; waits beyond
// MaxRetryAfter are capped.
func retryAfter(value string, now time.Time) (time.Duration, bool) {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0, false
	}
	var delay time.Duration
	if secs, err := strconv.ParseInt(value, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		delay = time.Duration(min(secs, int64(MaxRetryAfter/time.Second))) * time.Second
	} else if at, err := http.ParseTime(value); err == nil {
		delay = at.Sub(now)
	} else {
		return 0, false
	}
	return min(max(delay, 0), MaxRetryAfter), true
}

// sendError is the error of a call that got no answer (err is the
// client's, which names the method and the URL without its password),
// with the secrets the call sent hidden: retryable, unless the default
// client refused the address or a redirect chain was too long.
func sendError(ctx context.Context, r Request, err error, secrets *redactor) error {
	var pe *privateError
	final := errors.As(err, &pe) || errors.Is(err, errTooManyRedirects)
	err = secrets.error(err) // a redirect's URL is the receiver's to write
	switch {
	case final:
		return runtime.NoRetry(err)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("no answer within the call's timeout of %s: %w", r.timeout(), err)
	}
	return err
}
