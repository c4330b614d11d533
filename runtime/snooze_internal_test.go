package runtime

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/pgtask/pgtask/gen"
)

// A snooze's outcome is read back as recorded when the job's row shows it
// (after a lost reply, or a refusal among others): its attempt given back,
// or the job failed past its cap in that attempt; not when the job moved
// on otherwise.
func TestSnoozeRecordedIn(t *testing.T) {
	o := outcome{row: gen.ClaimJobsRow{ID: 1, Attempts: 2, MaxAttempts: 5}, err: fmt.Errorf("wait: %w", Snooze(0))}
	capped := json.RawMessage(`[{"attempt": 2, "error": "snoozed 101 times, cap 100"}]`)
	for _, tc := range []struct {
		job  gen.PgtaskJob
		want bool
	}{
		{gen.PgtaskJob{Attempts: 1, Status: gen.PgtaskJobStatusQueued, Errors: json.RawMessage(`[]`)}, true},
		{gen.PgtaskJob{Attempts: 1, Status: gen.PgtaskJobStatusScheduled, Errors: json.RawMessage(`[]`)}, true},
		{gen.PgtaskJob{Attempts: 2, Status: gen.PgtaskJobStatusFailed, Errors: capped}, true},
		// Claimed again meanwhile, or its attempt still running: not this record.
		{gen.PgtaskJob{Attempts: 2, Status: gen.PgtaskJobStatusStarted, Errors: json.RawMessage(`[]`)}, false},
		{gen.PgtaskJob{Attempts: 2, Status: gen.PgtaskJobStatusFailed, Errors: json.RawMessage(`[{"attempt": 2, "error": "lease expired"}]`)}, false},
		{gen.PgtaskJob{Attempts: 1, Status: gen.PgtaskJobStatusSucceeded, Errors: json.RawMessage(`[]`)}, false},
	} {
		if got := o.recordedIn(tc.job); got != tc.want {
			t.Errorf("snooze of attempt 2 recorded in %s job of %d attempts, errors %s: %t, want %t",
				tc.job.Status, tc.job.Attempts, tc.job.Errors, got, tc.want)
		}
	}
	// NoRetry wins over a snooze it wraps: that is a final failure.
	if nr := (outcome{row: o.row, err: NoRetry(Snooze(0))}); nr.snooze() != nil || nr.retries() {
		t.Error("NoRetry(Snooze(0)) is taken as a snooze")
	}
	if o.snooze() == nil || !o.retries() || o.retryInUs() != 0 {
		t.Error("a wrapped Snooze(0) is not a snooze that runs again at once")
	}
}
