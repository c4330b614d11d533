package runtime

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// An error that passes (a lock timeout, a deadlock, a serialization
// failure, a standby that was the primary, the session going away) is not
// the server refusing what was sent: sent again, it may well go through.
// Only the others make an outcome the failure its refusal makes it.
func TestRefusalLeavesOutPassingErrors(t *testing.T) {
	for _, tc := range []struct {
		code    string
		refused bool
	}{
		{"54001", true},  // stack depth limit exceeded: the value itself
		{"22P02", true},  // invalid text representation
		{"23505", true},  // unique violation
		{"P0001", true},  // raised by a function
		{"55P03", false}, // lock not available: a lock timeout
		{"40P01", false}, // deadlock detected
		{"40001", false}, // serialization failure
		{"25006", false}, // read-only transaction, after a failover
		{"57014", false}, // query canceled: statement timeout
		{"57P01", false}, // admin shutdown
		{"53300", false}, // too many connections
		{"08006", false}, // connection failure
	} {
		err := &recordError{fmt.Errorf("wrapped: %w", &pgconn.PgError{Severity: "ERROR", Code: tc.code})}
		if got := refusal(err); got != tc.refused {
			t.Errorf("refusal of SQLSTATE %s: %v, want %v", tc.code, got, tc.refused)
		}
		if got := recordRefused(err); got != tc.refused {
			t.Errorf("recordRefused of SQLSTATE %s: %v, want %v", tc.code, got, tc.refused)
		}
	}
	if refusal(errors.New("connection reset")) {
		t.Error("an error that is not the server's counts as a refusal")
	}
}
