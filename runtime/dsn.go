package runtime

import (
	"net/url"
	"strings"
)

// redactedPassword replaces a password RedactDSN hides, as pgx and
// net/url show one.
const redactedPassword = "xxxxx"

// RedactDSN returns a PostgreSQL connection string with every password
// hidden, so that it can be shown in logs, errors and help text: the
// password of a URL's user information, the values of the password and
// sslpassword parameters (in a URL's query, case and percent-encoding
// notwithstanding, or as keyword/value pairs, quoted or not), each
// replaced with "xxxxx". The rest is left as it was, to help find what is
// wrong with it. A keyword/value string it cannot read to the end, such as
// one with an unterminated quote, is hidden from the first place it cannot
// read.
func RedactDSN(dsn string) string {
	if scheme, rest, ok := strings.Cut(dsn, "://"); ok && !strings.ContainsAny(scheme, " \t\n\r='") {
		return scheme + "://" + redactURLRest(rest)
	}
	return redactKeywordValue(dsn)
}

// secretParam reports whether a connection parameter holds a password.
func secretParam(key string) bool {
	if k, err := url.QueryUnescape(key); err == nil {
		key = k
	}
	key = strings.ToLower(strings.TrimSpace(key))
	return key == "password" || key == "sslpassword"
}

// redactURLRest hides the passwords of a URL after its "scheme://". It
// reads the text rather than parsing it: a URL with several hosts, or one
// that does not parse, is hidden too.
func redactURLRest(rest string) string {
	var b strings.Builder
	// The query starts at the first '?'; a '@' before it ends the user
	// information: the last one, since a password may hold an unescaped
	// '@'.
	query := ""
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		rest, query = rest[:i], rest[i:]
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		user, _, hasPassword := strings.Cut(rest[:at], ":")
		b.WriteString(user)
		if hasPassword {
			b.WriteString(":" + redactedPassword)
		}
		rest = rest[at:]
	}
	b.WriteString(rest)
	if query == "" {
		return b.String()
	}
	fragment := ""
	if i := strings.IndexByte(query, '#'); i >= 0 {
		query, fragment = query[:i], query[i:]
	}
	b.WriteByte('?')
	for i, pair := range strings.Split(query[1:], "&") {
		if i > 0 {
			b.WriteByte('&')
		}
		if key, _, ok := strings.Cut(pair, "="); ok && secretParam(key) {
			pair = key + "=" + redactedPassword
		}
		b.WriteString(pair)
	}
	b.WriteString(fragment)
	return b.String()
}

// redactKeywordValue hides the passwords of a keyword/value connection
// string, read as libpq reads one: key = value pairs apart by white space,
// a value in single quotes when it holds spaces, a backslash escaping the
// next character.
func redactKeywordValue(s string) string {
	var b strings.Builder
	i := 0
	space := func() {
		for i < len(s) && isSpace(s[i]) {
			b.WriteByte(s[i])
			i++
		}
	}
	for {
		space()
		if i == len(s) {
			return b.String()
		}
		start := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[start:i]
		j := i
		for j < len(s) && isSpace(s[j]) {
			j++
		}
		if j == len(s) || s[j] != '=' || key == "" {
			// Not a key = value pair: show no more, it may be a
			// password.
			b.WriteString(redactedPassword)
			return b.String()
		}
		b.WriteString(key)
		space()
		b.WriteByte('=')
		i++
		space()
		start = i
		quoted := i < len(s) && s[i] == '\''
		if quoted {
			i++
		}
		closed := !quoted
		for i < len(s) {
			c := s[i]
			if c == '\\' && i+1 < len(s) {
				i += 2
				continue
			}
			if quoted && c == '\'' {
				i++
				closed = true
				break
			}
			if !quoted && isSpace(c) {
				break
			}
			i++
		}
		switch {
		case !closed:
			b.WriteString(redactedPassword)
			return b.String()
		case secretParam(key) && quoted:
			b.WriteString("'" + redactedPassword + "'")
		case secretParam(key):
			b.WriteString(redactedPassword)
		default:
			b.WriteString(s[start:i])
		}
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}
