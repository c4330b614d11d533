package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
)

// The size limits hold in the database too: a producer that calls the
// enqueue function itself, past the Go checks, is refused an oversize
// payload or metadata with a stable SQLSTATE and a message that says which
// job and which limit, and nothing of its batch is stored. What the Go side
// accepts, the database accepts.
func TestEnqueueFunctionRefusesOversizeJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := grantTestRoles(t, b, false)
	g := gen.New(poolAs(t, b, r.Producer))
	job := func(payloads []json.RawMessage, metadata []json.RawMessage) gen.InsertJobsParams {
		n := len(payloads)
		return gen.InsertJobsParams{
			Payloads: payloads, Settings: make([]int32, n), Groups: make([]int32, n),
			Kinds: []string{"big"}, Queues: []string{"limits"}, Priorities: []int16{0}, AgingMs: []int32{0}, MaxAttempts: []int32{1},
			FailBlocksGroup: []bool{false}, RunAt: []string{""}, DelayUs: []int64{0},
			GroupQueues: []string{}, GroupKeys: []string{}, Metadata: metadata,
		}
	}
	ones := func(p gen.InsertJobsParams) gen.InsertJobsParams {
		for i := range p.Settings {
			p.Settings[i] = 1
		}
		return p
	}
	small := json.RawMessage(`{"n":1}`)
	// {"a": "xx…"} as jsonb prints it: exactly MaxPayloadBytes, then one more.
	atLimit := json.RawMessage(`{"a": "` + strings.Repeat("x", runtime.MaxPayloadBytes-9) + `"}`)
	overLimit := json.RawMessage(`{"a": "` + strings.Repeat("x", runtime.MaxPayloadBytes-8) + `"}`)
	meta := func(value string) json.RawMessage { return mustJSON(t, map[string]string{"k": value}) }

	for _, c := range []struct {
		name     string
		p        gen.InsertJobsParams
		code     string
		contains string
	}{
		{"an oversize payload", ones(job([]json.RawMessage{small, overLimit}, nil)),
			"54000", "job 2: payload is 8388609 bytes, more than the 8388608 allowed"},
		// 64 numbers of 131,072 digits: 600 bytes sent, 8 MiB and more printed.
		{"a payload whose numbers print past the limit", ones(job([]json.RawMessage{
			json.RawMessage("[" + strings.TrimSuffix(strings.Repeat("1e131071,", 64), ",") + "]")}, nil)),
			"54000", "job 1: payload is 8388736 bytes, more than the 8388608 allowed"},
		{"oversize metadata", ones(job([]json.RawMessage{small, small}, []json.RawMessage{nil, meta(strings.Repeat("m", runtime.MaxMetadataBytes))})),
			"54000", "job 2: metadata is 16385 bytes, more than the 16384 allowed"},
		{"metadata with a value that is not a string", ones(job([]json.RawMessage{small}, []json.RawMessage{json.RawMessage(`{"k":{"deep":1}}`)})),
			"22023", `job 1: metadata value of "k" is not a string`},
	} {
		_, err := g.InsertJobs(ctx, c.p)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != c.code || !strings.Contains(pgErr.Message, c.contains) {
			t.Errorf("%s: %v; want SQLSTATE %s saying %q", c.name, err, c.code, c.contains)
		}
	}
	// The function for one plain job checks the same.
	plain := func(payload json.RawMessage) gen.InsertJobParams {
		return gen.InsertJobParams{Payload: payload, Kind: "big", Queue: "limits", MaxAttempts: 1}
	}
	for _, c := range []struct {
		name     string
		p        gen.InsertJobParams
		code     string
		contains string
	}{
		{"an oversize payload alone", plain(overLimit), "54000", "pgtask.enqueue_job: payload is 8388609 bytes, more than the 8388608 allowed"},
		{"a payload whose numbers print past the limit, alone",
			plain(json.RawMessage("[" + strings.TrimSuffix(strings.Repeat("1e131071,", 64), ",") + "]")),
			"54000", "pgtask.enqueue_job: payload is 8388736 bytes, more than the 8388608 allowed"},
		{"a scalar payload alone", plain(json.RawMessage(`"x"`)), "23514", "jobs_payload_object"},
		{"an empty kind alone", gen.InsertJobParams{Payload: small, Queue: "limits", MaxAttempts: 1}, "23514", "jobs_kind_not_empty"},
		{"no attempts alone", gen.InsertJobParams{Payload: small, Kind: "big", Queue: "limits"}, "23514", "jobs_max_attempts_valid"},
	} {
		_, err := g.InsertJob(ctx, c.p)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != c.code || !strings.Contains(pgErr.Message, c.contains) {
			t.Errorf("%s: %v; want SQLSTATE %s saying %q", c.name, err, c.code, c.contains)
		}
	}
	if n, err := runtime.CountJobs(ctx, b.pool, runtime.JobFilter{}); err != nil || n != 0 {
		t.Fatalf("refused batches stored %d jobs (%v), want none", n, err)
	}
	if _, err := g.InsertJob(ctx, plain(atLimit)); err != nil {
		t.Fatalf("a payload at the limit, alone: %v; want it stored", err)
	}

	// At the limits, accepted.
	res, err := g.InsertJobs(ctx, ones(job([]json.RawMessage{atLimit, small},
		[]json.RawMessage{nil, meta(strings.Repeat("m", runtime.MaxMetadataBytes-1))})))
	if err != nil || len(res.Ids) != 2 {
		t.Fatalf("a payload and metadata at the limits: %+v, %v; want both stored", res, err)
	}
}
