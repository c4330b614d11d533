package httptask

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strings"
)

// redacted is what a secret's value becomes in what the handler stores or
// its errors show.
const redacted = "[REDACTED]"

// redactor hides the secrets a call sends wherever a receiver may echo
// them: in an answer's body, headers or status line, in the URL it
// redirects to, in the client's errors. The nil redactor hides nothing.
type redactor struct {
	// forms are every way a secret is hidden in, longest first: each
	// value, its credentials without an auth scheme, and those as JSON,
	// a form or a URL path escape them.
	forms    []string
	replacer *strings.Replacer
}

// newRedactor hides values, the secrets a call sends. Empty ones are
// skipped; nil when nothing is left.
func newRedactor(values ...string) *redactor {
	seen := map[string]bool{}
	var forms []string
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			forms = append(forms, s)
		}
	}
	for _, v := range values {
		bare := []string{v}
		// "Bearer <token>": a receiver may show the token alone.
		if scheme, credentials, ok := strings.Cut(v, " "); ok && scheme != "" && checkHeader(scheme, "") == nil {
			bare = append(bare, strings.TrimSpace(credentials))
		}
		for _, b := range bare {
			add(b)
			add(jsonEscaped(b, true))
			add(jsonEscaped(b, false))
			add(url.QueryEscape(b))
			add(url.PathEscape(b))
		}
	}
	if len(forms) == 0 {
		return nil
	}
	// The longest first, so that a secret containing another is hidden
	// whole.
	slices.SortStableFunc(forms, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(forms))
	for _, f := range forms {
		pairs = append(pairs, f, redacted)
	}
	return &redactor{forms: forms, replacer: strings.NewReplacer(pairs...)}
}

// urlSecrets are the secrets a request's URL sends: the password of its
// user information, and the Basic credentials the client makes of it.
func urlSecrets(u *url.URL) []string {
	if u == nil || u.User == nil {
		return nil
	}
	password, ok := u.User.Password()
	if !ok || password == "" {
		return nil
	}
	basic := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + password))
	return []string{password, "Basic " + basic}
}

// jsonEscaped is s as a JSON string holds it, without the quotes.
func jsonEscaped(s string, escapeHTML bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(escapeHTML)
	if err := enc.Encode(s); err != nil {
		return ""
	}
	return strings.TrimSuffix(strings.TrimSuffix(b.String(), "\n"), `"`)[1:]
}

// string hides the secrets in s.
func (r *redactor) string(s string) string {
	if r == nil {
		return s
	}
	return r.replacer.Replace(s)
}

// bytes hides the secrets in b, a body read in part when cut: a secret
// whose start ends it is cut off too.
func (r *redactor) bytes(b []byte, cut bool) []byte {
	if r == nil {
		return b
	}
	if cut {
		b = r.cutPartial(b)
	}
	return []byte(r.replacer.Replace(string(b)))
}

// cutPartial drops the end of b that is the start of a secret.
func (r *redactor) cutPartial(b []byte) []byte {
	longest := 0
	for _, f := range r.forms {
		for n := min(len(f)-1, len(b)); n > longest; n-- {
			if bytes.HasSuffix(b, []byte(f[:n])) {
				longest = n
				break
			}
		}
	}
	return b[:len(b)-longest]
}

// error returns err, or an error of its message with the secrets hidden
// when it shows one. Decide what err means before: the copy wraps nothing.
func (r *redactor) error(err error) error {
	if r == nil || err == nil {
		return err
	}
	if msg := err.Error(); r.string(msg) != msg {
		return errors.New(r.string(msg))
	}
	return err
}
