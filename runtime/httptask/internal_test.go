package httptask

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
)

// Handle registers with a copy of the settings the generator reads from
// Request's tag; a changed tag must change both.
func TestHandlerSpecMatchesTheTag(t *testing.T) {
	if !reflect.DeepEqual(*handlerSpec, *requestSpec) {
		t.Fatalf("handlerSpec %+v differs from the generated requestSpec %+v: copy the tag's settings into handlerSpec", *handlerSpec, *requestSpec)
	}
}

// The committed pgtask_gen.go is what the generator makes of this package
// now. It generates into a copy of the package, so the source is never
// touched.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the generator")
	}
	// The copy must sit inside the module for the generator to load it; a
	// directory starting with _ is left out of ./... patterns.
	dir, err := os.MkdirTemp(".", "_gen-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "pgtask_gen.go" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("go", "run", "github.com/pgtask/pgtask/cmd/pgtask", "gen", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("pgtask gen: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dir, "pgtask_gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("pgtask_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("pgtask_gen.go is stale; run go generate ./runtime/httptask. The generator now writes:\n%s", got)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		value string
		want  time.Duration
		ok    bool
	}{
		{"120", 2 * time.Minute, true},
		{" 0 ", 0, true},
		{"Sat, 01 Mar 2025 12:00:30 GMT", 30 * time.Second, true},
		{"Saturday, 01-Mar-25 12:01:00 GMT", time.Minute, true}, // RFC 850
		{"Sat, 01 Mar 2025 11:00:00 GMT", 0, true},              // past: at once
		{"999999999999", MaxRetryAfter, true},
		{"Sun, 01 Mar 2026 12:00:00 GMT", MaxRetryAfter, true},
		{"", 0, false},
		{"-5", 0, false},
		{"soon", 0, false},
		{"1.5", 0, false},
	} {
		got, ok := retryAfter(c.value, now)
		if got != c.want || ok != c.ok {
			t.Errorf("retryAfter(%q) = %s, %v; want %s, %v", c.value, got, ok, c.want, c.ok)
		}
	}
}

func TestPrivateAddresses(t *testing.T) {
	for addr, want := range map[string]bool{
		// IPv6 forms that embed an IPv4 address are judged by it.
		"64:ff9b::a00:1":                       true,  // NAT64 (RFC 6052) of 10.0.0.1
		"64:ff9b::7f00:1":                      true,  // NAT64 of 127.0.0.1
		"64:ff9b::a9fe:a9fe":                   true,  // NAT64 of 169.254.169.254
		"64:ff9b::6440:1":                      true,  // NAT64 of 100.64.0.1
		"64:ff9b::808:808":                     false, // NAT64 of 8.8.8.8
		"64:ff9b:1::a9fe:a9fe":                 true,  // local-use NAT64 (RFC 8215)
		"64:ff9b:1:a9fe:a9:fe00::":             true,  // local-use NAT64, /48 layout
		"2002:a00:1::1":                        true,  // 6to4 of 10.0.0.1
		"2002:7f00:1::":                        true,  // 6to4 of 127.0.0.1
		"2002:a9fe:a9fe::1":                    true,  // 6to4 of 169.254.169.254
		"2002:808:808::1":                      false, // 6to4 of 8.8.8.8
		"::a00:1":                              true,  // IPv4-compatible 10.0.0.1
		"::7f00:1":                             true,  // IPv4-compatible 127.0.0.1
		"::808:808":                            true,  // IPv4-compatible: deprecated, never routed
		"::ffff:a9fe:a9fe":                     true,  // IPv4-mapped 169.254.169.254
		"::ffff:0:a00:1":                       true,  // IPv4-translated (RFC 2765) 10.0.0.1
		"2001:0:4136:e378:8000:63bf:f5ff:fffe": true,  // Teredo, client 10.0.0.1
		"2001:0:a00:1:8000:63bf:f7f7:f7f7":     true,  // Teredo, server 10.0.0.1
		"2001:0:4136:e378:8000:63bf:f7f7:f7f7": false, // Teredo, server 65.54.227.120, client 8.8.8.8
		"2001:0:4136:e378:8000:63bf:3fff:fdd2": true,  // Teredo, client 192.0.2.45 (documentation)
		"fe80::1%eth0":                         true,
		"fec0::1":                              true, // site-local (deprecated)
		"ff02::1":                              true,
		"100::1":                               true, // discard-only
		"2001:db8::1":                          true, // documentation
		"3fff::1":                              true, // documentation (RFC 9637)
		"2001:2::1":                            true, // benchmarking
		"2001:10::1":                           true, // ORCHID
		"5f00::1":                              true, // SRv6 SIDs
		"192.0.0.8":                            true, // IETF protocol assignments
		"192.0.2.1":                            true, // documentation
		"198.18.0.1":                           true, // benchmarking
		"198.51.100.1":                         true,
		"203.0.113.1":                          true,
		"240.0.0.1":                            true, // reserved
		"255.255.255.255":                      true,
		"2a00:1450:4001::200e":                 false,
		"1.0.0.1":                              false,
		"198.20.0.1":                           false,
		"127.0.0.1":                            true,
		"10.1.2.3":                             true,
		"172.16.0.1":                           true,
		"192.168.1.1":                          true,
		"169.254.169.254":                      true, // cloud metadata
		"100.64.0.1":                           true,
		"0.0.0.0":                              true,
		"0.1.2.3":                              true,
		"224.0.0.1":                            true,
		"::1":                                  true,
		"::":                                   true,
		"fd00::1":                              true,
		"fe80::1":                              true,
		"::ffff:127.0.0.1":                     true,
		"::ffff:10.0.0.1":                      true,
		"8.8.8.8":                              false,
		"93.184.216.34":                        false,
		"100.128.0.1":                          false,
		"2606:4700::1111":                      false,
		"::ffff:1.1.1.1":                       false,
	} {
		if got := private(netip.MustParseAddr(addr)); got != want {
			t.Errorf("private(%s) = %v, want %v", addr, got, want)
		}
	}
}

// The dialer's check sees addresses as the dialer writes them.
func TestRefusePrivateDialAddresses(t *testing.T) {
	for address, want := range map[string]bool{
		"[64:ff9b::a00:1]:443":   true,
		"[2002:a00:1::1]:80":     true,
		"[::ffff:10.0.0.1]:80":   true,
		"[fe80::1%eth0]:80":      true,
		"169.254.169.254:80":     true,
		"[2606:4700::1111]:443":  false,
		"[64:ff9b::808:808]:443": false,
		"93.184.216.34:443":      false,
	} {
		err := refusePrivate(t.Context(), "tcp", address, nil)
		var pe *privateError
		if got := errors.As(err, &pe); got != want || !want && err != nil {
			t.Errorf("refusePrivate(%s) = %v, want refused %v", address, err, want)
		}
		if want && err != nil && !strings.Contains(err.Error(), "set httptask.Config.AllowPrivate") {
			t.Errorf("refusePrivate(%s) = %v, which does not say how to allow it", address, err)
		}
	}
}

func TestSetBodyKeepsTextAsTextAndTheRestAsBytes(t *testing.T) {
	for _, c := range []struct {
		name      string
		body      []byte
		truncated bool
		text      string
		binary    []byte
	}{
		{"json", []byte(`{"ok":true}`), false, `{"ok":true}`, nil},
		{"empty", nil, false, "", nil},
		{"nul", []byte("a\x00b"), false, "", []byte("a\x00b")},
		{"invalid utf-8", []byte{0xff, 0xfe, 'x'}, false, "", []byte{0xff, 0xfe, 'x'}},
		// "é" is two bytes; the cut kept the first.
		{"cut inside a character", []byte("caf\xc3"), true, "caf", nil},
		{"whole character at the cut", []byte("café"), true, "café", nil},
	} {
		var r Response
		setBody(&r, c.body, c.truncated)
		if r.Body != c.text || string(r.BodyBase64) != string(c.binary) || r.Truncated != c.truncated {
			t.Errorf("%s: got text %q, bytes %q, truncated %v; want %q, %q, %v", c.name, r.Body, r.BodyBase64, r.Truncated, c.text, c.binary, c.truncated)
		}
	}
}

func TestCheckHeader(t *testing.T) {
	for _, c := range []struct {
		name, value string
		ok          bool
	}{
		{"X-Api-Key", "abc\tdef", true},
		{"x_weird!#$%&'*+-.^`|~", "v", true},
		{"", "v", false},
		{"Bad Name", "v", false},
		{"Colon:", "v", false},
		{"X-Ok", "line\r\nInjected: yes", false},
		{"X-Ok", "nul\x00", false},
		{"X-Ok", "del\x7f", false},
	} {
		err := checkHeader(c.name, c.value)
		if (err == nil) != c.ok {
			t.Errorf("checkHeader(%q, %q) = %v, want ok %v", c.name, c.value, err, c.ok)
		}
		if err != nil && c.value != "" && strings.Contains(err.Error(), c.value) {
			t.Errorf("checkHeader(%q, ...) shows the value: %v", c.name, err)
		}
	}
}

func TestRetryableStatuses(t *testing.T) {
	for status, want := range map[int]bool{
		408: true, 425: true, 429: true, 500: true, 502: true, 503: true, 504: true, 599: true,
		400: false, 401: false, 403: false, 404: false, 409: false, 410: false, 422: false, 499: false,
	} {
		if got := retryable(status); got != want {
			t.Errorf("retryable(%d) = %v, want %v", status, got, want)
		}
	}
}

// A correctly signed request verifies only within the tolerance, by
// default five minutes either way, and leaves its body to read.
func TestVerifyChecksTheTimestamp(t *testing.T) {
	key := []byte("0123456789abcdef")
	body := []byte(`{"n":1}`)
	signed := func(at time.Time) *http.Request {
		r := httptest.NewRequest("POST", "/", bytes.NewReader(body))
		r.Header.Set(IdempotencyHeader, "pgtask-7")
		r.Header.Set(TimestampHeader, strconv.FormatInt(at.Unix(), 10))
		r.Header.Set(SignatureHeader, "v1=00 "+sign(key, "pgtask-7", at.Unix(), body)) // a rotated-out key's first
		return r
	}
	now := time.Now()
	for _, c := range []struct {
		at        time.Time
		tolerance time.Duration
		want      string // empty: verifies
	}{
		{now, time.Minute, ""},
		{now.Add(-4 * time.Minute), 0, ""},
		{now.Add(4 * time.Minute), 0, ""},
		{now.Add(-6 * time.Minute), 0, "ago, longer than the 5m0s tolerated"},
		{now.Add(-2 * time.Minute), time.Minute, "ago, longer than the 1m0s tolerated"},
		{now.Add(10 * time.Minute), 0, "in the future, more than the 5m0s tolerated"},
	} {
		r := signed(c.at)
		err := Verify(r, key, c.tolerance)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("signed at %s, tolerance %s: %v", c.at.Sub(now), c.tolerance, err)
		case c.want != "" && (!errors.Is(err, ErrInvalidSignature) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("signed at %s, tolerance %s: %v; want %q", c.at.Sub(now), c.tolerance, err, c.want)
		case c.want == "":
			if rest, _ := io.ReadAll(r.Body); !bytes.Equal(rest, body) {
				t.Errorf("after Verify the body reads %q, want %q", rest, body)
			}
		}
	}
}

// MaxTimeout is the bound Request's validate tag sets.
func TestMaxTimeoutIsTheValidatedBound(t *testing.T) {
	r := Request{Method: "GET", URL: "https://example.com/", Timeout: MaxTimeout}
	if err := runtime.Validate(RequestKind, r); err != nil {
		t.Fatalf("Timeout MaxTimeout: %v", err)
	}
	r.Timeout++
	if err := runtime.Validate(RequestKind, r); err == nil {
		t.Fatal("a Timeout beyond MaxTimeout validates")
	}
}

func TestShowBody(t *testing.T) {
	long := strings.Repeat("x", snippetBytes+10)
	for _, c := range []struct {
		body      string
		truncated bool
		want      string
	}{
		{"", false, ""},
		{" \n", false, ""},
		{"database\nis down\n", false, ": database is down"},
		{"bad \xff byte", false, ": bad \uFFFD byte"},
		{"cut", true, ": cut…"},
		{long, false, ": " + long[:snippetBytes] + "…"},
	} {
		if got := showBody([]byte(c.body), c.truncated); got != c.want {
			t.Errorf("showBody(%q, %v) = %q, want %q", c.body, c.truncated, got, c.want)
		}
	}
}

func TestRedactor(t *testing.T) {
	r := newRedactor("Bearer tok-123456", "", `a"b<c`, "tok-12")
	for _, c := range []struct {
		in   string
		cut  bool
		want string
	}{
		{"Authorization: Bearer tok-123456", false, "Authorization: [REDACTED]"},
		{"token tok-123456 refused", false, "token [REDACTED] refused"},
		{"the prefix tok-12 too", false, "the prefix [REDACTED] too"},
		{`{"k":"a\"b\u003cc","l":"a\"b<c"}`, false, `{"k":"[REDACTED]","l":"[REDACTED]"}`},
		{"k=a%22b%3Cc", false, "k=[REDACTED]"},
		{"plain text", false, "plain text"},
		// A body cut inside a secret loses the secret's start.
		{"header: Bearer tok-1234", true, "header: "},
		{"ends with tok-1", true, "ends with "},
		{"ends with t", true, "ends with "},
		{"ends with tok-1", false, "ends with tok-1"},
	} {
		if got := string(r.bytes([]byte(c.in), c.cut)); got != c.want {
			t.Errorf("bytes(%q, %v) = %q, want %q", c.in, c.cut, got, c.want)
		}
	}
	if got := r.string("GET /x?t=tok-123456"); got != "GET /x?t=[REDACTED]" {
		t.Errorf("string = %q", got)
	}
	err := r.error(errors.New(`Get "https://x/?t=tok-123456": EOF`))
	if err == nil || strings.Contains(err.Error(), "tok-12") {
		t.Errorf("error = %v, want the secret hidden", err)
	}
	var none *redactor = newRedactor("", "")
	if none != nil || none.string("x") != "x" || string(none.bytes([]byte("y"), true)) != "y" || none.error(io.EOF) != io.EOF {
		t.Error("a redactor of no secrets changes what it is given")
	}
	if got := urlSecrets(mustParseURL(t, "https://shop:p%40ss@example.com/")); len(got) != 2 || got[0] != "p@ss" || got[1] != "Basic c2hvcDpwQHNz" {
		t.Errorf("urlSecrets = %q", got)
	}
}

func mustParseURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// A URL that does not parse (enqueued without validation) fails the job
// with an error that does not show its password.
func TestUnparsableURLErrorShowsNoPassword(t *testing.T) {
	c, err := newCaller(Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.newRequest(t.Context(), &runtime.Job{ID: 1}, Request{Method: "GET", URL: "http://shop:s3cret@ho st/x"})
	if err == nil || !runtime.IsNoRetry(err) || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "invalid character") {
		t.Fatalf("newRequest = %v; want a final error saying why, without the password", err)
	}
}
