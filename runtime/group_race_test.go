package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// Producers enqueue into a few hot groups while held and lease workers drain
// them, so that groups empty and are created again by racing enqueues, heads
// finish while an enqueue into their group is in flight (busy advances), and
// an operator cancels queued jobs meanwhile. At no time may two jobs of a
// group run; each producer's jobs of a group start in its order; every job
// ends succeeded or cancelled; no group is left with unfinished jobs.
func TestGroupsRaceEnqueuesCancelsAndWorkersInBothModes(t *testing.T) {
	t.Parallel()
	testGroupsRace(t, false)
}

// The same race, with the operator also retrying jobs it cancelled (older
// jobs of live groups, put back below their group's head) and deleting
// finished jobs of live groups as retention does. A retried job runs out of
// its producer's order by design, so only overlaps, stuck groups and
// unfinished jobs are checked.
func TestGroupsRaceRetriesAndDeletesOfOlderJobs(t *testing.T) {
	t.Parallel()
	testGroupsRace(t, true)
}

func testGroupsRace(t *testing.T, chaos bool) {
	b := setup(t)
	ctx := context.Background()
	const groups, producers, perProducer = 4, 3, 120

	var mu sync.Mutex
	running := map[string]int{}
	last := map[string]int{} // group/producer -> last seq started
	var problems []string
	handler := func(_ context.Context, job *runtime.Job) error {
		p, err := runtime.DecodePayload[seqPayload](job)
		if err != nil {
			return err
		}
		key := fmt.Sprintf("%s/%d", job.Group, p.Seq/1000)
		seq := p.Seq % 1000
		mu.Lock()
		running[job.Group]++
		if running[job.Group] > 1 {
			problems = append(problems, fmt.Sprintf("group %s: job %d started while another job of the group ran", job.Group, job.ID))
		}
		if prev, ok := last[key]; ok && seq < prev && !chaos {
			problems = append(problems, fmt.Sprintf("%s: seq %d started after seq %d", key, seq, prev))
		}
		last[key] = seq
		mu.Unlock()
		time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
		mu.Lock()
		running[job.Group]--
		mu.Unlock()
		if seq%11 == 5 && job.Attempt == 1 {
			return errors.New("first attempt fails; the group waits for the retry")
		}
		return nil
	}
	for _, batch := range []int{1, 8} {
		startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{"hot": {Concurrency: 4, BatchSize: batch}}},
			runtime.Registration{Kind: "seq", Handler: handler, Backoff: fastRetry})
	}
	for range 2 {
		startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{"hot": {Mode: runtime.ModeLease, Concurrency: 8}}},
			runtime.Registration{Kind: "seq", Handler: handler, Backoff: fastRetry})
	}

	var wg sync.WaitGroup
	idsCh := make(chan runtime.JobID, groups*producers*perProducer)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range perProducer {
				var reqs []runtime.EnqueueRequest
				for g := range groups {
					if rand.IntN(3) == 0 {
						continue
					}
					req := runtime.EnqueueRequest{Kind: "seq", Payload: mustJSON(t, seqPayload{Seq: p*1000 + s})}
					req.Apply(runtime.WithQueue("hot"), runtime.WithGroup(fmt.Sprintf("g%d", g)))
					reqs = append(reqs, req)
				}
				if len(reqs) == 0 {
					continue
				}
				// Half in the producer's own transaction that stays open a moment,
				// so that heads finish while the enqueue is in flight.
				err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
					ids, err := runtime.EnqueueMany(ctx, tx, reqs)
					for _, id := range ids {
						idsCh <- id
					}
					if s%2 == 0 {
						time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
					}
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
			}
		}()
	}
	// An operator cancels some queued jobs as they come.
	done := make(chan struct{})
	var opWG sync.WaitGroup
	opWG.Add(1)
	go func() {
		defer opWG.Done()
		var cancelled []runtime.JobID
		for {
			select {
			case <-done:
				return
			case id := <-idsCh:
				if rand.IntN(15) == 0 {
					if ok, err := runtime.CancelJob(ctx, b.pool, id); err != nil {
						t.Error(err)
					} else if ok && chaos {
						cancelled = append(cancelled, id)
					}
				}
				if chaos && len(cancelled) > 0 && rand.IntN(10) == 0 {
					i := rand.IntN(len(cancelled))
					if _, err := runtime.RetryJob(ctx, b.pool, cancelled[i]); err != nil {
						t.Error(err)
					}
					cancelled = slices.Delete(cancelled, i, i+1)
				}
				if chaos && rand.IntN(40) == 0 {
					if _, err := runtime.DeleteJobs(ctx, b.pool, runtime.JobFilter{Queue: "hot", Statuses: []runtime.Status{runtime.StatusSucceeded}}, nil); err != nil {
						t.Error(err)
					}
				}
			}
		}
	}()
	wg.Wait()
	close(done)
	opWG.Wait()

	jobs := b.waitQueueDone(t, "hot", 90*time.Second)
	for _, j := range jobs {
		if j.Status != testdb.PgtaskJobStatusSucceeded && j.Status != testdb.PgtaskJobStatusCancelled {
			t.Errorf("job %d is %s: %s", j.ID, j.Status, j.Errors)
		}
	}
	mu.Lock()
	for _, p := range problems {
		t.Error(p)
	}
	mu.Unlock()
	// Every group emptied: its row goes once its last head is moved on from.
	for g := range groups {
		key := fmt.Sprintf("g%d", g)
		deadline := time.Now().Add(10 * time.Second)
		for {
			row, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: "hot", GroupKey: key})
			if errors.Is(err, pgx.ErrNoRows) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Errorf("group %s kept its row with no unfinished job: %+v", key, row)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("%d jobs", len(jobs))
}

// Moving a group on after its head finished while an enqueue into the group
// was in flight (the worker's retry after its commit, AdvanceGroups) must
// not cost more the more jobs wait behind the head: the head is known, and
// the group's row no longer names it.
func TestBusyAdvanceDoesNotReadTheGroupsBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const backlog = 20000
	ids := enqueueGroup(t, b, runtime.DefaultQueue, "g", backlog+1)
	w := idleWorker(t, b.url, runtime.Config{})
	if err := w.Register(runtime.Registration{Kind: "seq", Handler: func(context.Context, *runtime.Job) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	// An enqueue into the group stays in flight while the head finishes.
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, tx, "seq", seqPayload{Group: "g", Seq: backlog + 1}, runtime.WithGroup("g"))
	if info, err := w.WorkOne(ctx); err != nil || info == nil || info.ID != ids[0] {
		t.Fatalf("WorkOne: %+v, %v; want job %d", info, err, ids[0])
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	q := testdb.New(conn)
	if g, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: runtime.DefaultQueue, GroupKey: "g"}); err != nil || g.HeadID != int64(ids[0]) {
		t.Fatalf("before the advance: %+v, %v; want head %d, finished", g, err, ids[0])
	}
	if _, err := q.GroupPendingIndexReads(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := q.GroupPendingIndexReads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	busy, err := gen.New(conn).AdvanceGroups(ctx, gen.AdvanceGroupsParams{Queue: runtime.DefaultQueue, GroupKeys: []string{"g"}})
	if err != nil || len(busy) > 0 {
		t.Fatalf("AdvanceGroups: %v, %v", busy, err)
	}
	// The session's counts reach the shared statistics when it goes idle
	// after a forced flush: ask for one, then read.
	if _, err := q.GroupPendingIndexReads(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := q.GroupPendingIndexReads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g, err := b.q.GetGroup(ctx, testdb.GetGroupParams{Queue: runtime.DefaultQueue, GroupKey: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if g.HeadID != int64(ids[1]) {
		t.Fatalf("head %d after the advance, want %d", g.HeadID, ids[1])
	}
	t.Logf("index entries read: %d", after-before)
	if reads := after - before; reads > 100 {
		t.Fatalf("moving the group on read %d entries of the pending jobs' index, with %d jobs behind the head", reads, backlog)
	}
}

// A job of a lease-mode run recorded alone (as a success that wrote through
// job.Tx() is, in its own transaction) after its group's head finished
// without moving the group on (an enqueue into the group was in flight)
// moves the group on past both: its next job becomes the head at once,
// rather than after a retry or maintenance's next round.
func TestFollowerRecordedAloneMovesItsGroupOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := enqueueGroup(t, b, runtime.DefaultQueue, "g", 3)
	rows, err := b.gen.ClaimLeasedJobs(ctx, gen.ClaimLeasedJobsParams{
		Queue: runtime.DefaultQueue, Max: 2, WorkerID: 2, LeaseMs: 60_000, Token: 7, RunMax: 1,
	})
	if err != nil || len(rows) != 2 || rows[0].ID != int64(ids[0]) || rows[1].ID != int64(ids[1]) {
		t.Fatalf("lease claim: %+v, %v; want the head and the job behind it", rows, err)
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	enqueue(t, tx, "seq", seqPayload{Group: "g", Seq: 3}, runtime.WithGroup("g"))
	record := func(id runtime.JobID) gen.SettleJobsRow {
		t.Helper()
		r, err := b.gen.SettleJobs(ctx, gen.SettleJobsParams{
			Queue: runtime.DefaultQueue, Ids: []int64{int64(id)}, Attempts: []int32{1},
			Results: []json.RawMessage{nil}, Errors: []json.RawMessage{nil}, RetryInUs: []int64{-1},
		})
		if err != nil || r.Recorded != 1 {
			t.Fatalf("record job %d: %+v, %v", id, r, err)
		}
		return r
	}
	if r := record(ids[0]); !slices.Equal(r.Busy, []string{"g"}) {
		t.Fatalf("recording the head with an enqueue in flight: busy %v; want [g]", r.Busy)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	record(ids[1])
	if j := b.job(t, ids[2]); !j.IsHead || j.Status != testdb.PgtaskJobStatusQueued {
		t.Fatalf("after the job behind the head was recorded, the group's next job is %s, head %t; want the queued head",
			j.Status, j.IsHead)
	}
}
