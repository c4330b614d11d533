package cli

import (
	"io"
	"regexp"
	"strings"
)

// redacted stands for a password the command does not print, as
// runtime.RedactDSN writes it.
const redacted = "xxxxx"

var (
	// urlPassword matches a URL's user and password, up to the last @
	// before the host (a password may hold an unescaped @):
	// postgres://user:password@host.
	urlPassword = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^:@/\s]*):[^\s/]*@`)
	// queryPassword matches a password in a URL's query: ?password=...&,
	// and sslpassword likewise.
	queryPassword = regexp.MustCompile(`(?i)([?&](?:ssl)?password=)[^&#\s"'` + "`" + `]*`)
	// settingPassword matches a password among key=value settings:
	// password=value or password='quoted value', with spaces around = or
	// not; sslpassword likewise.
	settingPassword = regexp.MustCompile(`(?i)(^|[\s"'` + "`" + `])((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
)

// redact returns s with every database password it holds replaced by
// xxxxx: the password of a URL (postgres://user:password@host, or
// ?password= in its query) and of key=value settings (password=secret,
// password='a secret'). s may be a connection string or any text that
// quotes one, such as an error message.
func redact(s string) string {
	s = urlPassword.ReplaceAllString(s, "${1}:"+redacted+"@")
	s = queryPassword.ReplaceAllString(s, "${1}"+redacted)
	return settingPassword.ReplaceAllStringFunc(s, func(m string) string {
		sub := settingPassword.FindStringSubmatch(m)
		value, end := sub[3], ""
		// A value that runs into the quote closing the text it sits in
		// (`host=h password=secret`) keeps the quote.
		if !strings.HasPrefix(value, "'") {
			if i := strings.IndexAny(value, "`\""); i >= 0 {
				end = value[i:]
			}
		}
		return sub[1] + sub[2] + redacted + end
	})
}

// redactingWriter writes what it is given with its passwords redacted.
// Each write is redacted alone: the command writes a message, or a flag's
// line of help, in one write.
type redactingWriter struct{ w io.Writer }

func (r redactingWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, redact(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
