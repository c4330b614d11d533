package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"time"
)

// csrfField is the hidden form field that carries the token.
const csrfField = "csrf"

// csrfKey signs the tokens the forms carry. It is made by New and lives
// as long as the handler: a token from before a restart is refused, and the
// person reloads the page.
type csrfKey struct {
	key [32]byte
}

func newCSRFKey() *csrfKey {
	k := &csrfKey{}
	rand.Read(k.key[:]) // never fails (crypto/rand panics rather than return an error)
	return k
}

// token returns a token for forms shown to user at now: the time, and an
// HMAC of the time and the user.
func (k *csrfKey) token(user string, now time.Time) string {
	var issued [8]byte
	binary.BigEndian.PutUint64(issued[:], uint64(now.Unix()))
	return base64.RawURLEncoding.EncodeToString(append(issued[:], k.sum(issued[:], user)...))
}

func (k *csrfKey) sum(issued []byte, user string) []byte {
	m := hmac.New(sha256.New, k.key[:])
	m.Write([]byte("pgtask dashboard form\x00"))
	m.Write(issued)
	m.Write([]byte(user))
	return m.Sum(nil)
}

// Why a token is refused.
var (
	errNoToken      = errors.New("the form carries no token: submit it from the dashboard's page")
	errBadToken     = errors.New("the form's token is not valid here: reload the page and try again")
	errExpiredToken = errors.New("the form is too old: reload the page and try again")
)

// check says whether token was issued by k for user, within csrfTTL of now.
func (k *csrfKey) check(token, user string, now time.Time) error {
	if token == "" {
		return errNoToken
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) != 8+sha256.Size {
		return errBadToken
	}
	if !hmac.Equal(raw[8:], k.sum(raw[:8], user)) {
		return errBadToken
	}
	issued := time.Unix(int64(binary.BigEndian.Uint64(raw[:8])), 0)
	if age := now.Sub(issued); age > csrfTTL || age < -time.Minute {
		return errExpiredToken
	}
	return nil
}
