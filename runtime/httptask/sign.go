package httptask

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers a signed request carries. The signature is
// "v1=" + hex(HMAC-SHA256(key, idempotencyKey + "." + timestamp + "." + body)),
// where timestamp is the value of TimestampHeader (Unix seconds) and
// idempotencyKey that of IdempotencyHeader: signing the key keeps a
// recorded request from being replayed under another one.
const (
	TimestampHeader   = "X-Pgtask-Timestamp"
	SignatureHeader   = "X-Pgtask-Signature"
	IdempotencyHeader = "Idempotency-Key"
)

// DefaultTolerance is how far a signed request's timestamp may be from the
// receiver's clock when Verify is given no tolerance.
const DefaultTolerance = 5 * time.Minute

// minKeyBytes is the shortest signing key Handle accepts.
const minKeyBytes = 16

// ErrInvalidSignature is wrapped by every error of Verify.
var ErrInvalidSignature = errors.New("httptask: invalid signature")

// sign computes the v1 signature of a request.
func sign(key []byte, idempotencyKey string, timestamp int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(idempotencyKey))
	mac.Write([]byte("."))
	mac.Write([]byte(strconv.FormatInt(timestamp, 10)))
	mac.Write([]byte("."))
	mac.Write(body)
	return "v1=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify checks that r was signed with key by a handler configured with
// that SigningKey, and is no older (and no newer) than tolerance by this
// machine's clock (DefaultTolerance when tolerance is not positive). It
// reads r's body and puts it back, so the caller can read it after: limit
// its size first (http.MaxBytesReader), since it is read before anything
// is known about the sender. The error wraps ErrInvalidSignature.
//
// A request can arrive more than once (the call is retried when an answer
// is lost): use its Idempotency-Key header to do the work once.
func Verify(r *http.Request, key []byte, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	ts, err := strconv.ParseInt(r.Header.Get(TimestampHeader), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: header %s is missing or not a Unix time", ErrInvalidSignature, TimestampHeader)
	}
	switch age := time.Since(time.Unix(ts, 0)); {
	case age > tolerance:
		return fmt.Errorf("%w: signed %s ago, longer than the %s tolerated (a replay, or clocks apart)", ErrInvalidSignature, age.Round(time.Second), tolerance)
	case age < -tolerance:
		return fmt.Errorf("%w: signed %s in the future, more than the %s tolerated (clocks apart)", ErrInvalidSignature, (-age).Round(time.Second), tolerance)
	}
	body, err := readBack(r)
	if err != nil {
		return fmt.Errorf("%w: read the body: %v", ErrInvalidSignature, err)
	}
	want := sign(key, r.Header.Get(IdempotencyHeader), ts, body)
	for _, got := range strings.Fields(r.Header.Get(SignatureHeader)) {
		if hmac.Equal([]byte(got), []byte(want)) {
			return nil
		}
	}
	if r.Header.Get(SignatureHeader) == "" {
		return fmt.Errorf("%w: header %s is missing", ErrInvalidSignature, SignatureHeader)
	}
	return fmt.Errorf("%w: no v1 signature in %s matches the key and the request", ErrInvalidSignature, SignatureHeader)
}

// readBack reads r's body whole and leaves a copy in its place.
func readBack(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, err
}
