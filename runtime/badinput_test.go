package runtime_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// Rows that get past the Go checks (written by other code with the same
// statement) are stopped by the table itself, with the constraint named, and
// the whole statement inserts nothing.
func TestTableRefusesBadRowsAndInsertsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Two jobs: an ungrouped one with the first settings, and one in group
	// g with the second.
	good := func() gen.InsertJobsParams {
		return gen.InsertJobsParams{
			Payloads: []json.RawMessage{json.RawMessage(`{}`), json.RawMessage(`[]`)},
			Settings: []int32{1, 2}, Groups: []int32{0, 1},
			Kinds: []string{"k", "k"}, Queues: []string{"q", "q"}, Priorities: []int16{0, 0}, AgingMs: []int32{0, 0},
			MaxAttempts: []int32{1, 1}, FailBlocksGroup: []bool{false, false},
			RunAt: []string{"", ""}, DelayUs: []int64{0, 0},
			GroupQueues: []string{"q"}, GroupKeys: []string{"g"},
		}
	}
	const misnamed = "1 job(s) name no listed settings, or no listed group of their queue"
	cases := []struct {
		name  string
		spoil func(p *gen.InsertJobsParams)
		want  string
	}{
		{"empty kind", func(p *gen.InsertJobsParams) { p.Kinds[1] = "" }, "jobs_kind_not_empty"},
		{"negative aging", func(p *gen.InsertJobsParams) { p.AgingMs[1] = -5 }, "jobs_aging_valid"},
		{"empty queue", func(p *gen.InsertJobsParams) { p.Queues[0] = "" }, "jobs_queue_not_empty"},
		{"scalar payload", func(p *gen.InsertJobsParams) { p.Payloads[1] = json.RawMessage(`"x"`) }, "jobs_payload_object"},
		{"JSON null payload", func(p *gen.InsertJobsParams) { p.Payloads[1] = json.RawMessage(`null`) }, "jobs_payload_object"},
		{"zero attempts", func(p *gen.InsertJobsParams) { p.MaxAttempts[1] = 0 }, "jobs_max_attempts_valid"},
		{"bad run_at", func(p *gen.InsertJobsParams) { p.RunAt[1] = "tomorrow-ish" }, "invalid input syntax for type timestamp with time zone"},
		{"per-job arrays of different lengths", func(p *gen.InsertJobsParams) { p.Groups = p.Groups[:1] }, "argument arrays differ in length"},
		{"settings arrays of different lengths", func(p *gen.InsertJobsParams) { p.Kinds = p.Kinds[:1] }, "argument arrays differ in length"},
		{"group lists of different lengths", func(p *gen.InsertJobsParams) { p.GroupQueues = nil }, "argument arrays differ in length"},
		{"empty group key", func(p *gen.InsertJobsParams) { p.GroupKeys[0] = "" }, "jobs_group_key_not_empty"},
		{"long queue, delayed", func(p *gen.InsertJobsParams) {
			p.Queues[0] = strings.Repeat("q", 3000)
			p.DelayUs[0] = 3_600_000_000
		}, "jobs_queue_bounded"},
		{"long kind", func(p *gen.InsertJobsParams) { p.Kinds[0] = strings.Repeat("k", 129) }, "jobs_kind_bounded"},
		{"long group key", func(p *gen.InsertJobsParams) { p.GroupKeys[0] = strings.Repeat("g", 1025) }, "queue_groups_group_key_bounded"},

		{"settings out of range", func(p *gen.InsertJobsParams) { p.Settings[0] = 3 }, misnamed},
		{"no settings", func(p *gen.InsertJobsParams) { p.Settings[1] = 0 }, misnamed},
		{"group out of range", func(p *gen.InsertJobsParams) { p.Groups[1] = 2 }, misnamed},
		{"negative group", func(p *gen.InsertJobsParams) { p.Groups[0] = -1 }, misnamed},
		{"group of another queue", func(p *gen.InsertJobsParams) { p.GroupQueues[0] = "other" }, misnamed},
		{"group without a job", func(p *gen.InsertJobsParams) {
			p.GroupQueues, p.GroupKeys = append(p.GroupQueues, "q"), append(p.GroupKeys, "h")
		}, "1 listed group(s) have no job"},
		{"malformed JSON", func(p *gen.InsertJobsParams) { p.Payloads[1] = json.RawMessage(`{"a":`) }, "invalid input syntax for type json"},

		{"tenant out of range", func(p *gen.InsertJobsParams) {
			p.Fair, p.FairQueues, p.FairTenants = []int32{0, 2}, []string{"q"}, []string{"a"}
		}, "a job names no listed tenant of its queue"},
		{"tenant of another queue", func(p *gen.InsertJobsParams) {
			p.Fair, p.FairQueues, p.FairTenants = []int32{1, 0}, []string{"other"}, []string{"a"}
		}, "a job names no listed tenant of its queue"},
		{"tenant arrays of different lengths", func(p *gen.InsertJobsParams) {
			p.Fair, p.FairQueues, p.FairTenants = []int32{1, 0}, []string{"q"}, []string{}
		}, "tenant arrays differ in length"},
		{"per-job tenants of another length", func(p *gen.InsertJobsParams) {
			p.Fair, p.FairQueues, p.FairTenants = []int32{1}, []string{"q"}, []string{"a"}
		}, "tenant arrays differ in length"},
		{"long tenant", func(p *gen.InsertJobsParams) {
			p.Fair, p.FairQueues, p.FairTenants = []int32{1, 1}, []string{"q"}, []string{strings.Repeat("t", 1025)}
		}, "jobs_tenant_bounded"},
	}
	for _, c := range cases {
		p := good()
		c.spoil(&p)
		_, err := b.gen.InsertJobs(ctx, p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", c.name, err, c.want)
		}
	}
	if n := b.countJobs(t); n != 0 {
		t.Fatalf("%d jobs inserted by refused statements", n)
	}
	if _, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: "q", GroupKey: "g"}); err == nil {
		t.Fatal("a refused statement left a group row behind")
	}
	if qs, err := runtime.FairQueues(ctx, b.pool); err != nil || len(qs) != 0 {
		t.Fatalf("refused statements left fair queues %v (%v)", qs, err)
	}
	// The same statement with good rows works: the checks are not too strict.
	// The unique batch's own arrays.
	unique := func(keys []string, windows []int64, statuses []string) gen.InsertJobsParams {
		p := good()
		p.UniqueKeys, p.UniqueWindowsUs, p.UniqueStatuses = keys, windows, statuses
		return p
	}
	held := "scheduled,queued,started"
	for _, c := range []struct {
		name string
		p    gen.InsertJobsParams
		want string
	}{
		{"long unique key", unique([]string{strings.Repeat("u", 1300), ""}, []int64{0, 0}, []string{held, held}), "jobs_unique_key_bounded"},
		{"unique arrays of different lengths", unique([]string{"u"}, []int64{0, 0}, []string{held, held}), "unique arrays differ in length"},
		{"unique status that is not one", unique([]string{"u", ""}, []int64{0, 0}, []string{"queued,lost", held}), "invalid input value for enum"},
	} {
		_, err := b.gen.InsertJobs(ctx, c.p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", c.name, err, c.want)
		}
	}
	if n := b.countJobs(t); n != 0 {
		t.Fatalf("%d jobs inserted by refused unique statements", n)
	}
	if row, err := b.gen.InsertJobs(ctx, good()); err != nil || len(row.Ids) != 2 {
		t.Fatalf("good rows: %v, %v", row.Ids, err)
	}
}

// Times that decide when a job runs come from the database's clock, so a
// worker or producer whose clock is off does not change them: a delay is
// measured from the database's now(), and only an explicit RunAt carries the
// caller's clock.
func TestDelaysUseTheDatabaseClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := time.Now()
	id := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithDelay(time.Hour))
	j := b.job(t, id)
	if d := j.RunAfter.Sub(j.CreatedAt); d != time.Hour {
		t.Fatalf("run_after - created_at = %s, want exactly 1h on the database's clock", d)
	}
	if j.Status != testdb.PgtaskJobStatusScheduled {
		t.Fatalf("status %s, want scheduled", j.Status)
	}
	// A RunAt in the past (a producer whose clock runs behind) runs now.
	past := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithRunAt(before.Add(-24*time.Hour)))
	if j := b.job(t, past); j.Status != testdb.PgtaskJobStatusQueued {
		t.Fatalf("job due yesterday is %s, want queued", j.Status)
	}
}
