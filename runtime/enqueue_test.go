package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

func (b *bundle) countJobs(t *testing.T) int64 {
	t.Helper()
	counts, err := b.q.CountJobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, c := range counts {
		n += c.Jobs
	}
	return n
}

func TestEnqueueRefusesBadRequestsAndInsertsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ok := runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`{}`)}
	cases := []struct {
		name string
		req  runtime.EnqueueRequest
		want string
	}{
		{"empty kind", runtime.EnqueueRequest{Payload: json.RawMessage(`{}`)}, "kind is empty"},
		{"no payload", runtime.EnqueueRequest{Kind: "k"}, "payload is empty"},
		{"malformed JSON", runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`{"a":`)}, "not valid JSON"},
		{"scalar JSON", runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(` 42`)}, "must be a JSON object or array"},
		{"JSON null", runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`null`)}, "must be a JSON object or array"},
		{"NUL in a string", runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`{"a":"x\u0000y"}`)}, `contains \u0000`},
		{"NUL after an escaped backslash", runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`{"a":"x\\\u0000y"}`)}, `contains \u0000`},
		{"NUL in a key", runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`{"\u0000":1}`)}, `contains \u0000`},
		{"huge payload", runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`{"a":"` + strings.Repeat("x", runtime.MaxPayloadBytes) + `"}`)}, "more than the"},
		{"negative attempts", runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`{}`), EnqueueOptions: runtime.EnqueueOptions{MaxAttempts: -1}}, "max attempts -1 is out of range"},
		{"negative delay", runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`{}`), EnqueueOptions: runtime.EnqueueOptions{Delay: -time.Second}}, "delay -1s is negative"},
		{"long queue, delayed", runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`{}`), EnqueueOptions: runtime.EnqueueOptions{Queue: strings.Repeat("q", 3000), Delay: time.Hour}}, "queue is 3000 bytes, more than the 128 allowed"},
		{"long kind", runtime.EnqueueRequest{Kind: strings.Repeat("k", runtime.MaxKindBytes+1), Payload: json.RawMessage(`{}`)}, "kind is 129 bytes"},
		{"long group key", runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`{}`), EnqueueOptions: runtime.EnqueueOptions{Group: strings.Repeat("g", 2677)}}, "group key is 2677 bytes, more than the 1024 allowed"},
		{"NUL in a group key", runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`{}`), EnqueueOptions: runtime.EnqueueOptions{Group: "a\x00b"}}, "contains a NUL byte"},
		{"queue not UTF-8", runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`{}`), EnqueueOptions: runtime.EnqueueOptions{Queue: "q\xff"}}, "not valid UTF-8"},
		{"start time and delay", runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`{}`), EnqueueOptions: runtime.EnqueueOptions{RunAt: time.Now(), Delay: time.Second}}, "set RunAt or Delay, not both"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The bad request sits between good ones: the whole batch is refused.
			_, err := runtime.EnqueueMany(context.Background(), b.pool, []runtime.EnqueueRequest{ok, c.req, ok})
			var ee *runtime.EnqueueError
			if !errors.As(err, &ee) || ee.Index != 1 || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want an EnqueueError for item 1 containing %q", err, c.want)
			}
		})
	}
	if n := b.countJobs(t); n != 0 {
		t.Fatalf("%d jobs inserted by refused requests", n)
	}
}

// A backslash that is itself escaped does not start a \u0000 escape: such
// payloads are valid for jsonb and are stored as sent.
func TestEnqueueAcceptsEscapedBackslashBeforeU0000(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, payload := range []string{
		`{"path":"C:\\u0000dir"}`,
		`{"path":"\\\\u0000"}`,
		`["u0000", "\\", "x\\\\\\\\u0000"]`,
	} {
		id, err := runtime.Enqueue(context.Background(), b.pool, runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(payload)})
		if err != nil {
			t.Fatalf("payload %s: %v", payload, err)
		}
		var want, got any
		if err := json.Unmarshal([]byte(payload), &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b.job(t, id).Payload, &got); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("payload %s stored as %s (%v)", payload, b.job(t, id).Payload, err)
		}
	}
}

func TestEnqueueDefaultsAndOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var reqs []runtime.EnqueueRequest
	for i := range 5 {
		r := runtime.EnqueueRequest{Kind: "k", Payload: mustJSON(t, map[string]int{"i": i})}
		if i%2 == 0 {
			r.Apply(runtime.WithGroup("g"))
		}
		reqs = append(reqs, r)
	}
	ids, err := runtime.EnqueueMany(ctx, b.pool, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		j := b.job(t, id)
		var got map[string]int
		if err := json.Unmarshal(j.Payload, &got); err != nil || got["i"] != i {
			t.Errorf("id %d has payload %s, want item %d's", id, j.Payload, i)
		}
		if i > 0 && id <= ids[i-1] {
			t.Errorf("ids not increasing: %v", ids)
		}
		if j.Queue != runtime.DefaultQueue || j.MaxAttempts != runtime.DefaultMaxAttempts || j.Status != testdb.PgtaskJobStatusQueued {
			t.Errorf("job %d: queue %q max attempts %d status %s", id, j.Queue, j.MaxAttempts, j.Status)
		}
		// Ungrouped jobs and the first job of the new group are heads.
		if wantHead := i%2 == 1 || i == 0; j.IsHead != wantHead {
			t.Errorf("item %d is_head = %v, want %v", i, j.IsHead, wantHead)
		}
	}
	g, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: runtime.DefaultQueue, GroupKey: "g"})
	if err != nil || g.HeadID != int64(ids[0]) {
		t.Fatalf("group g: %+v, %v; want head %d", g, err, ids[0])
	}
	// A job scheduled for later is not runnable yet.
	later := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithRunAt(time.Now().Add(time.Hour)))
	if j := b.job(t, later); j.Status != testdb.PgtaskJobStatusScheduled {
		t.Fatalf("job for an hour from now is %s", j.Status)
	}
}

// Enqueueing in the caller's transaction: the job exists, and runs, only if
// that transaction commits.
func TestEnqueueJoinsTheCallersTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ran := make(chan runtime.JobID, 2)
	startWorker(t, b.url, runtime.Config{}, runtime.Registration{
		Kind:    "tx",
		Handler: func(ctx context.Context, job *runtime.Job) error { ran <- job.ID; return nil },
	})

	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rolledBack := enqueue(t, tx, "tx", map[string]int{}, runtime.WithGroup("g"))
	select {
	case id := <-ran:
		t.Fatalf("job %d ran before its enqueueing transaction ended", id)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err = b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	committed := enqueue(t, tx, "tx", map[string]int{}, runtime.WithGroup("g"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, committed, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	if got := <-ran; got != committed {
		t.Fatalf("ran job %d, want %d", got, committed)
	}
	if _, err := b.q.GetJob(ctx, int64(rolledBack)); err == nil {
		t.Fatal("the rolled-back job exists")
	}
	select {
	case id := <-ran:
		t.Fatalf("job %d ran as well", id)
	case <-time.After(200 * time.Millisecond):
	}
}

// Enqueueing into a database without pgtask's schema says what is missing.
func TestEnqueueWithoutSchemaSaysSo(t *testing.T) {
	t.Parallel()
	empty := emptyPool(t)
	_, err := runtime.Enqueue(context.Background(), empty, runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`{}`)})
	if err == nil || !strings.Contains(err.Error(), "enqueue 1 job(s)") || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("err = %v", err)
	}
}

// enqueueAsync enqueues one job into each of groups, in one batch, from a
// goroutine; the returned channel yields their ids (nil after reporting an
// error) when the call returns.
func enqueueAsync(t *testing.T, db runtime.DB, groups ...string) <-chan []runtime.JobID {
	t.Helper()
	reqs := make([]runtime.EnqueueRequest, len(groups))
	for i, g := range groups {
		reqs[i] = runtime.EnqueueRequest{Kind: "k", Payload: mustJSON(t, map[string]int{})}
		reqs[i].Apply(runtime.WithGroup(g))
	}
	done := make(chan []runtime.JobID, 1)
	go func() {
		ids, err := runtime.EnqueueMany(context.Background(), db, reqs)
		if err != nil {
			t.Errorf("enqueue into %v: %v", groups, err)
		}
		done <- ids
	}()
	return done
}

// waitBlockedBy waits until some session waits for a lock tx holds.
func waitBlockedBy(t *testing.T, b *bundle, tx pgx.Tx, name string) {
	t.Helper()
	pid := int32(tx.Conn().PgConn().PID())
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, err := b.q.CountBlockedBy(context.Background(), pid)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing waited for %s", name)
		}
	}
}

// mustWait fails unless the enqueue is still blocked after a while, then
// returns a function that waits for it to finish.
func mustWait(t *testing.T, done <-chan []runtime.JobID) func() []runtime.JobID {
	t.Helper()
	select {
	case ids := <-done:
		t.Fatalf("enqueue returned jobs %v without waiting for the other transaction", ids)
	case <-time.After(300 * time.Millisecond):
	}
	return func() []runtime.JobID {
		select {
		case ids := <-done:
			if ids == nil {
				t.FailNow()
			}
			return ids
		case <-time.After(10 * time.Second):
			t.Fatal("enqueue still blocked after the other transaction ended")
			return nil
		}
	}
}

// A group drains (its last job is cancelled, which deletes the group's row)
// in a transaction that an enqueue into the group must wait for. Once the
// drain commits, the new job starts the group again as its head; had the
// enqueue trusted the row it first saw, the job would wait behind a head that
// no longer exists.
func TestEnqueueIntoAGroupThatDrainsMeanwhileStartsItAnew(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	old := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithGroup("g"))
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	if ok, err := gen.New(tx).CancelJob(ctx, int64(old)); err != nil || !ok {
		t.Fatalf("cancel: %v, %v", ok, err)
	}
	wait := mustWait(t, enqueueAsync(t, b.pool, "g"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	id := wait()[0]
	if j := b.job(t, id); !j.IsHead || j.Status != testdb.PgtaskJobStatusQueued {
		t.Fatalf("new job: head %v, %s; want the queued head", j.IsHead, j.Status)
	}
	if g, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: runtime.DefaultQueue, GroupKey: "g"}); err != nil || g.HeadID != int64(id) {
		t.Fatalf("group row: %+v, %v; want head %d", g, err, id)
	}
}

// Two transactions enqueue into the same new group. The second waits for the
// first: if the first commits, its job is the head and the second's waits
// behind it; if it rolls back, the second's job is the head.
func TestConcurrentEnqueuesIntoANewGroup(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		b := setup(t)
		ctx := context.Background()
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first := enqueue(t, tx, "k", map[string]int{}, runtime.WithGroup("g"))
		wait := mustWait(t, enqueueAsync(t, b.pool, "g"))
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		second := b.job(t, wait()[0])
		g, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: runtime.DefaultQueue, GroupKey: "g"})
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			if head := b.job(t, first); !head.IsHead || second.IsHead || g.HeadID != int64(first) {
				t.Fatalf("after commit: first head %v, second head %v, group head %d; want %d", head.IsHead, second.IsHead, g.HeadID, first)
			}
		} else if !second.IsHead || g.HeadID != second.ID {
			t.Fatalf("after rollback: second head %v, group head %d; want %d", second.IsHead, g.HeadID, second.ID)
		}
	}
}

// One batch mixing kinds, queues, priorities, attempts, group policies,
// delays and groups (the same key in two queues is two groups): every job
// gets its own settings and group, however the batch shares them out.
func TestEnqueueManyKeepsEachJobsSettings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	type want struct {
		kind, queue, group string
		priority           int16
		attempts           int
		blocks             bool
		delayed            bool
	}
	wants := []want{
		{"a", "q1", "", 0, 20, false, false},
		{"a", "q1", "g", 0, 20, false, false},
		{"b", "q1", "g", 3, 20, false, false},
		{"a", "q2", "g", 0, 20, false, false},
		{"a", "q1", "", 0, 5, true, false},
		{"a", "q1", "h", 0, 20, false, true},
		{"a", "q1", "", 0, 20, false, false},
		{"b", "q1", "g", 3, 20, false, false},
	}
	reqs := make([]runtime.EnqueueRequest, len(wants))
	for i, w := range wants {
		reqs[i] = runtime.EnqueueRequest{Kind: w.kind, Payload: mustJSON(t, map[string]int{"i": i})}
		reqs[i].Apply(runtime.WithQueue(w.queue), runtime.WithGroup(w.group), runtime.WithPriority(w.priority),
			runtime.WithMaxAttempts(w.attempts), runtime.WithFailBlocksGroup(w.blocks))
		if w.delayed {
			reqs[i].Apply(runtime.WithDelay(time.Hour))
		}
	}
	ids, err := runtime.EnqueueMany(ctx, b.pool, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range wants {
		j := b.job(t, ids[i])
		var p map[string]int
		if err := json.Unmarshal(j.Payload, &p); err != nil || p["i"] != i {
			t.Errorf("job %d has payload %s", i, j.Payload)
		}
		group := ""
		if j.GroupKey != nil {
			group = *j.GroupKey
		}
		wantStatus := testdb.PgtaskJobStatusQueued
		if w.delayed {
			wantStatus = testdb.PgtaskJobStatusScheduled
		}
		if j.Kind != w.kind || j.Queue != w.queue || group != w.group || j.Priority != w.priority ||
			int(j.MaxAttempts) != w.attempts || j.FailBlocksGroup != w.blocks || j.Status != wantStatus {
			t.Errorf("job %d: kind %s queue %s group %q priority %d attempts %d blocks %v status %s; want %+v",
				i, j.Kind, j.Queue, group, j.Priority, j.MaxAttempts, j.FailBlocksGroup, j.Status, w)
		}
	}
	// Group g of q1 starts with job 1, g of q2 with job 3, h with job 5.
	for _, c := range []struct {
		queue, key string
		head       int
	}{{"q1", "g", 1}, {"q2", "g", 3}, {"q1", "h", 5}} {
		g, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: c.queue, GroupKey: c.key})
		if err != nil || g.HeadID != int64(ids[c.head]) {
			t.Errorf("group %s/%s: %+v, %v; want head job %d", c.queue, c.key, g, err, c.head)
		}
	}
}

// The rare path of creating group rows: a row the insert found present is
// gone when the enqueue locks it, while another enqueue holds a row it
// inserted and waits for one this enqueue inserted. The enqueue undoes its
// attempt, which lets the other finish, and tries again; neither deadlocks.
//
// T1 enqueues into a, b and c. It inserts b, finds a present (a row another
// transaction had just created) and waits at c for Y, which inserted c and
// has not committed. Meanwhile a's row goes away (its only job is cancelled)
// and T2, enqueueing into a and b, inserts a and waits for T1's b. When Y
// rolls back, T1 finds a missing. Had it inserted a now, after b, it would
// wait for T2 while T2 waits for it.
func TestEnqueuesCreatingGroupsDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	a0 := enqueue(t, b.pool, "k", map[string]int{}, runtime.WithGroup("a"))

	// X drains a and starts it anew with a1, uncommitted: T1's lock on a's
	// old row waits for X.
	x, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Rollback(ctx) //nolint:errcheck // committed below
	if ok, err := gen.New(x).CancelJob(ctx, int64(a0)); err != nil || !ok {
		t.Fatalf("cancel: %v, %v", ok, err)
	}
	a1 := enqueue(t, x, "k", map[string]int{}, runtime.WithGroup("a"))
	y, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Rollback(ctx) //nolint:errcheck // rolled back below
	enqueue(t, y, "k", map[string]int{}, runtime.WithGroup("c"))

	t1 := mustWait(t, enqueueAsync(t, b.pool, "a", "b", "c"))
	// Each step waits until the server shows T1 blocked as the scenario
	// needs, not for a fixed time: on a loaded machine T1 may not have
	// reached X's row yet, and then it would lock a's new row, the cancel
	// below would wait for T1 and T1 for Y, a cycle through this goroutine
	// that the server cannot see.
	waitBlockedBy(t, b, x, "X")
	if err := x.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitBlockedBy(t, b, y, "Y") // T1 now waits for Y at c
	if ok, err := b.gen.CancelJob(ctx, int64(a1)); err != nil || !ok {
		t.Fatalf("cancel a1: %v, %v", ok, err)
	}
	t2 := mustWait(t, enqueueAsync(t, b.pool, "a", "b"))
	if err := y.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	first, second := t1(), t2()

	// T2 committed first, so it heads a and b; T1 heads c.
	for _, c := range []struct {
		key  string
		head runtime.JobID
		not  runtime.JobID
	}{{"a", second[0], first[0]}, {"b", second[1], first[1]}, {"c", first[2], 0}} {
		g, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: runtime.DefaultQueue, GroupKey: c.key})
		if err != nil || g.HeadID != int64(c.head) {
			t.Errorf("group %s: %+v, %v; want head %d", c.key, g, err, c.head)
			continue
		}
		if j := b.job(t, c.head); !j.IsHead || !j.GroupID.Valid || j.GroupID.Int64 != g.ID {
			t.Errorf("group %s head job: head %v, group id %v; want group id %d", c.key, j.IsHead, j.GroupID.Int64, g.ID)
		}
		if c.not != 0 {
			if j := b.job(t, c.not); j.IsHead || j.GroupID.Int64 != g.ID {
				t.Errorf("group %s later job: head %v, group id %d; want a follower of row %d", c.key, j.IsHead, j.GroupID.Int64, g.ID)
			}
		}
	}
}

// A plain job enqueued alone (no group, unique key, metadata, limit, rate
// or tenant) goes to pgtask.enqueue_job, and its row is the one
// enqueue_jobs stores for the same request in a batch: the same status,
// head mark, settings and times. A job of a fair queue gets its tenant and
// a turn there too.
func TestPlainEnqueueStoresWhatABatchStores(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if err := runtime.SetFairQueue(ctx, b.pool, "fair", true); err != nil {
		t.Fatal(err)
	}
	runAt := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	cases := []struct {
		name string
		opts runtime.EnqueueOptions
	}{
		{"defaults", runtime.EnqueueOptions{}},
		{"queue, priority and attempts", runtime.EnqueueOptions{Queue: "plain", Priority: 3, MaxAttempts: 4}},
		{"strict priority", runtime.EnqueueOptions{Priority: 2, Aging: runtime.StrictPriority}},
		{"aging", runtime.EnqueueOptions{Priority: 5, Aging: 250 * time.Millisecond}},
		{"better than the default priority", runtime.EnqueueOptions{Priority: -3}},
		{"delayed", runtime.EnqueueOptions{Delay: 90 * time.Second, Priority: 1}},
		{"run at", runtime.EnqueueOptions{RunAt: runAt}},
		{"run at a time past", runtime.EnqueueOptions{RunAt: time.Now().Add(-time.Hour).Truncate(time.Microsecond)}},
		{"fail blocks group", runtime.EnqueueOptions{FailBlocksGroup: true}},
		{"a fair queue", runtime.EnqueueOptions{Queue: "fair", Priority: 1}},
	}
	// The parts of a row that do not depend on when it was inserted; a
	// fair job's turn, which the next job of its tenant moves on, only
	// set or not.
	type plainRow struct {
		job           testdb.PgtaskJob
		runIn, ageIn  time.Duration
		aged, hasTurn bool
	}
	row := func(j testdb.PgtaskJob, absolute bool) plainRow {
		r := plainRow{job: j, hasTurn: j.FairSeq.Valid}
		if !absolute {
			r.runIn = j.RunAfter.Sub(j.CreatedAt)
			r.job.RunAfter = time.Time{}
		}
		if j.AgeDue != nil {
			r.aged, r.ageIn = true, j.AgeDue.Sub(j.RunAfter)
		}
		r.job.ID, r.job.CreatedAt, r.job.AgeDue, r.job.FairSeq = 0, time.Time{}, nil, pgtype.Int8{}
		return r
	}
	for _, c := range cases {
		req := runtime.EnqueueRequest{Kind: "plain", Payload: json.RawMessage(`{"a": [1, "x"]}`), EnqueueOptions: c.opts}
		if alone, err := runtime.EnqueuedAlone(req); err != nil || !alone {
			t.Fatalf("%s: enqueued alone %v (%v), want it to be", c.name, alone, err)
		}
		id, err := runtime.Enqueue(ctx, b.pool, req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		ids, err := runtime.EnqueueMany(ctx, b.pool, []runtime.EnqueueRequest{req, req})
		if err != nil {
			t.Fatalf("%s, in a batch: %v", c.name, err)
		}
		absolute := !c.opts.RunAt.IsZero()
		got, want := row(b.job(t, id), absolute), row(b.job(t, ids[0]), absolute)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: enqueued alone\n %+v\nin a batch\n %+v", c.name, got, want)
		}
		if c.opts.Queue == "fair" && (got.job.Tenant == nil || *got.job.Tenant != "" || !got.hasTurn) {
			t.Errorf("%s: tenant %v, turn %v; want tenant \"\" and a turn", c.name, got.job.Tenant, got.hasTurn)
		}
	}

	// What only enqueue_jobs handles goes there.
	for name, opt := range map[string]runtime.EnqueueOption{
		"grouped":       runtime.WithGroup("g"),
		"unique":        runtime.WithUniqueKey("u"),
		"with metadata": runtime.WithMetadata("k", "v"),
		"limited":       runtime.WithLimit("", 2),
		"rate-limited":  runtime.WithRate("", 5, time.Second),
		"of a tenant":   runtime.WithTenant("t"),
	} {
		req := runtime.EnqueueRequest{Kind: "plain", Payload: json.RawMessage(`{}`)}
		req.Apply(opt)
		if alone, err := runtime.EnqueuedAlone(req); err != nil || alone {
			t.Errorf("%s: enqueued alone %v (%v), want it sent to enqueue_jobs", name, alone, err)
		}
	}
}
