package runtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// Every field of an enqueue request, malformed: the request is either
// refused with an *EnqueueError and inserts nothing, or stored exactly as
// given. The database never gets to refuse it, and a refusal never leaves
// half a job behind. Each input runs in a transaction rolled back after.
//
//	go test ./runtime -run '^$' -fuzz FuzzEnqueue -fuzztime 60s
func FuzzEnqueue(f *testing.F) {
	pool, err := pgxpool.New(context.Background(), pgtasktest.NewDatabase(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(pool.Close)
	for _, s := range []struct {
		kind, queue, group  string
		priority            int16
		maxAttempts         int
		delay, runAt        int64
		payload             string
		blocks, second, bad bool
	}{
		{"k", "", "", 0, 0, 0, 0, `{}`, false, false, false},
		{"k", "q", "g", -32768, 1, int64(time.Hour), 0, `[1,"x"]`, true, true, false},
		{"", "q\x00", "g\xff", 32767, -1, -1, 0, `{"a":"\u0000"}`, false, true, true},
		{"k", "q", "g", 0, math.MaxInt32 + 1, 0, 1 << 40, `"just a string"`, false, false, false},
		{"k", "q", "", 0, 0, math.MaxInt64, 0, `{"a":1e999999}`, false, false, false},
		{"k", "q", "", 0, 0, 0, -1 << 40, `{"a":"\ud800"}`, false, false, false},
		{"k", "q", "", 0, 0, 0, 253402300800, `{"a":"x"} trailing`, false, false, false},
		{"k", "q", "", 0, 0, 0, -1 << 40, `{}`, false, false, false},
		{"k", "q", "", 0, 0, 0, 1 << 43, `{}`, false, false, false},
		{"k", "q", "", 0, 0, 0, 253402300799, "[\"\xff\"]", false, false, false},
	} {
		f.Add(s.kind, s.queue, s.group, s.priority, s.maxAttempts, s.delay, s.runAt, s.payload, s.blocks, s.second, s.bad)
	}
	f.Fuzz(func(t *testing.T, kind, queue, group string, priority int16, maxAttempts int, delay, runAt int64,
		payload string, blocks, second, secondBad bool) {
		ctx := context.Background()
		req := runtime.EnqueueRequest{Kind: kind, Payload: json.RawMessage(payload), EnqueueOptions: runtime.EnqueueOptions{
			Queue: queue, Group: group, Priority: priority, MaxAttempts: maxAttempts,
			Delay: time.Duration(delay), FailBlocksGroup: blocks,
		}}
		if runAt != 0 {
			req.RunAt = time.Unix(runAt, 0)
		}
		reqs := []runtime.EnqueueRequest{req}
		if second {
			// A batch: the fuzzed request beside a good one, or a bad one.
			other := runtime.EnqueueRequest{Kind: "other", Payload: json.RawMessage(`{}`)}
			if secondBad {
				other.Payload = json.RawMessage(`{`)
			}
			reqs = append(reqs, other)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // every input is rolled back
		ids, err := runtime.EnqueueMany(ctx, tx, reqs)
		q := testdb.New(tx)
		if err != nil {
			var ee *runtime.EnqueueError
			if !errors.As(err, &ee) {
				t.Fatalf("refused by the database rather than checked first: %v", err)
			}
			counts, cerr := q.CountJobs(ctx)
			if cerr != nil {
				t.Fatal(cerr)
			}
			if len(counts) != 0 {
				t.Fatalf("refused (%v), but jobs were inserted: %v", err, counts)
			}
			return
		}
		j, err := q.GetJob(ctx, int64(ids[0]))
		if err != nil {
			t.Fatal(err)
		}
		wantQueue := queue
		if wantQueue == "" {
			wantQueue = runtime.DefaultQueue
		}
		wantAttempts := maxAttempts
		if wantAttempts == 0 {
			wantAttempts = runtime.DefaultMaxAttempts
		}
		gotGroup := ""
		if j.GroupKey != nil {
			gotGroup = *j.GroupKey
		}
		if j.Kind != kind || j.Queue != wantQueue || gotGroup != group || j.Priority != priority ||
			int(j.MaxAttempts) != wantAttempts || j.FailBlocksGroup != blocks {
			t.Fatalf("stored %+v for request %+v", j, req)
		}
		// The server's own reading of what was sent: jsonb keeps its own
		// form of numbers and of key order.
		sent, err := q.ParseJSONB(ctx, payload)
		if err != nil {
			t.Fatalf("accepted a payload the server cannot read: %v", err)
		}
		if !bytes.Equal(sent, j.Payload) {
			t.Fatalf("payload %s stored as %s", payload, j.Payload)
		}
		if !req.RunAt.IsZero() && j.RunAfter.Unix() != runAt {
			t.Fatalf("RunAt %v stored as %v", req.RunAt, j.RunAfter)
		}
	})
}
