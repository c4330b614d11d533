package httptask

import (
	"context"
	"errors"
	"fmt"
	"maps"
)

// SecretResolver returns the value of the secret called name, for a header
// a Request's SecretHeaders names it in. It runs on every attempt, so it
// may read a vault, the environment or a file that changes. An error that
// wraps ErrUnknownSecret fails the job at once; any other error fails the
// attempt, which is retried.
//
// A receiver may echo what it was sent: every value a resolver returns is
// hidden, shown as "[REDACTED]", in the job's result and errors, wherever
// the answer holds it.
type SecretResolver func(ctx context.Context, name string) (string, error)

// ErrUnknownSecret is what a SecretResolver's error wraps for a name it
// does not know.
var ErrUnknownSecret = errors.New("httptask: unknown secret")

// StaticSecrets resolves names from a fixed map. It copies the map.
func StaticSecrets(secrets map[string]string) SecretResolver {
	own := maps.Clone(secrets)
	return func(_ context.Context, name string) (string, error) {
		value, ok := own[name]
		if !ok {
			return "", fmt.Errorf("%w %q", ErrUnknownSecret, name)
		}
		return value, nil
	}
}
