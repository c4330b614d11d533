package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

func uniqueReq(kind, key string, opts ...runtime.EnqueueOption) runtime.EnqueueRequest {
	r := runtime.EnqueueRequest{Kind: kind, Payload: json.RawMessage(`{}`)}
	r.Apply(append([]runtime.EnqueueOption{runtime.WithUniqueKey(key)}, opts...)...)
	return r
}

// 16 sessions enqueue the same keys at once, alone and in batches: each key
// gets one job, every caller gets its id, and exactly one caller is told it
// inserted it.
func TestUniqueJobsRaceToOneInsert(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(b.url)
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const racers, keys = 16, 20
	type answer struct {
		key string
		res runtime.EnqueueResult
	}
	answers := make(chan answer, racers*keys*2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for r := range racers {
		wg.Go(func() {
			<-start
			for k := range keys {
				// Odd racers send the key in a batch with a key of their own.
				reqs := []runtime.EnqueueRequest{uniqueReq("k", fmt.Sprint("key", k))}
				if r%2 == 1 {
					reqs = append(reqs, uniqueReq("k", fmt.Sprintf("own-%d-%d", r, k), runtime.WithGroup("g")))
				}
				res, err := runtime.EnqueueResults(ctx, pool, reqs)
				if err != nil {
					t.Error(err)
					return
				}
				answers <- answer{fmt.Sprint("key", k), res[0]}
				if len(res) == 2 && res[1].Existed {
					t.Errorf("racer %d's own key %d existed", r, k)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(answers)
	ids := map[string]runtime.JobID{}
	inserted := map[string]int{}
	for a := range answers {
		if id, ok := ids[a.key]; ok && id != a.res.ID {
			t.Fatalf("%s: ids %d and %d", a.key, id, a.res.ID)
		}
		ids[a.key] = a.res.ID
		if !a.res.Existed {
			inserted[a.key]++
		}
	}
	for k := range keys {
		if n := inserted[fmt.Sprint("key", k)]; n != 1 {
			t.Errorf("key%d: %d callers were told they inserted it, want 1", k, n)
		}
	}
	counts, err := b.q.CountJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 1 || counts[0].Jobs != keys+racers/2*keys {
		t.Fatalf("jobs: %+v, want %d", counts, keys+racers/2*keys)
	}
}

// A key is held while its job is unfinished, then free; within a batch the
// second job of a key gets the first's id; a duplicate that would have
// started a group leaves the group to the batch's next job of it.
func TestUniqueKeyIsHeldWhileTheJobIsUnfinished(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	first, err := runtime.EnqueueResults(ctx, b.pool, []runtime.EnqueueRequest{
		uniqueReq("k", "x"), uniqueReq("k", "x"), uniqueReq("other", "x"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if first[0].Existed || !first[1].Existed || first[1].ID != first[0].ID || first[2].Existed || first[2].ID == first[0].ID {
		t.Fatalf("batch results %+v: want the second to be the first, the other kind's apart", first)
	}
	// Kinds and keys may hold the separator: no two pairs share a key.
	split, err := runtime.EnqueueResults(ctx, b.pool, []runtime.EnqueueRequest{uniqueReq("a:b", "c"), uniqueReq("a", "b:c")})
	if err != nil || split[0].Existed || split[1].Existed {
		t.Fatalf("kind a:b key c and kind a key b:c: %+v, %v; want two jobs", split, err)
	}
	res, err := runtime.EnqueueResults(ctx, b.pool, []runtime.EnqueueRequest{
		uniqueReq("k", "x", runtime.WithGroup("h")),
		{Kind: "k", Payload: json.RawMessage(`{}`), EnqueueOptions: runtime.EnqueueOptions{Group: "h"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Existed || res[0].ID != first[0].ID || res[1].Existed {
		t.Fatalf("results %+v", res)
	}
	var ran []runtime.JobID
	var mu sync.Mutex
	w, stop := newWorker(t, b.url, runtime.Config{}, runtime.Registration{Kind: "k", Handler: func(_ context.Context, job *runtime.Job) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, job.ID)
		return nil
	}})
	_ = w
	b.waitStatus(t, res[1].ID, 10*time.Second, testdb.PgtaskJobStatusSucceeded) // group h was not wedged
	b.waitStatus(t, first[0].ID, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	stop()
	again, err := runtime.EnqueueResults(ctx, b.pool, []runtime.EnqueueRequest{uniqueReq("k", "x")})
	if err != nil || again[0].Existed || again[0].ID == first[0].ID {
		t.Fatalf("after the job succeeded: %+v, %v; want a new job", again, err)
	}
}

// With a window the key is held for the window, succeeded jobs included;
// statuses can hold it after a failure too.
func TestUniqueWindowAndStatuses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	enqueueOne := func(r runtime.EnqueueRequest) runtime.EnqueueResult {
		t.Helper()
		res, err := runtime.EnqueueResults(ctx, b.pool, []runtime.EnqueueRequest{r})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	_, stop := newWorker(t, b.url, runtime.Config{},
		runtime.Registration{Kind: "ok", Handler: func(context.Context, *runtime.Job) error { return nil }},
		runtime.Registration{Kind: "bad", Handler: func(context.Context, *runtime.Job) error { return runtime.NoRetry(errors.New("no")) }})
	defer stop()

	// A window of 1,000 hours: the two enqueues fall in one.
	long := runtime.WithUniqueWindow(1000 * time.Hour)
	held := enqueueOne(uniqueReq("ok", "daily", long))
	b.waitStatus(t, held.ID, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
	if r := enqueueOne(uniqueReq("ok", "daily", long)); !r.Existed || r.ID != held.ID {
		t.Fatalf("within the window, after success: %+v, want job %d", r, held.ID)
	}
	short := enqueueOne(uniqueReq("ok", "brief", runtime.WithUniqueWindow(200*time.Millisecond)))
	time.Sleep(250 * time.Millisecond)
	if r := enqueueOne(uniqueReq("ok", "brief", runtime.WithUniqueWindow(200*time.Millisecond))); r.Existed || r.ID == short.ID {
		t.Fatalf("in the next window: %+v, want a new job", r)
	}

	failed := enqueueOne(uniqueReq("bad", "f", runtime.WithUniqueStatuses(runtime.StatusFailed)))
	b.waitStatus(t, failed.ID, 10*time.Second, testdb.PgtaskJobStatusFailed)
	if r := enqueueOne(uniqueReq("bad", "f", runtime.WithUniqueStatuses(runtime.StatusFailed))); !r.Existed {
		t.Fatalf("a failed job that holds its key: %+v", r)
	}
	freed := enqueueOne(uniqueReq("bad", "g"))
	b.waitStatus(t, freed.ID, 10*time.Second, testdb.PgtaskJobStatusFailed)
	next := enqueueOne(uniqueReq("bad", "g", runtime.WithDelay(time.Hour)))
	if next.Existed {
		t.Fatalf("a failure freed the key, but %+v", next)
	}
	// Retrying the failure would make two jobs hold the key: refused.
	if ok, err := runtime.RetryJob(ctx, b.pool, freed.ID); err == nil || ok {
		t.Fatalf("RetryJob of a job whose key another holds: %v, %v; want an error", ok, err)
	}
	if j := b.job(t, freed.ID); j.Status != testdb.PgtaskJobStatusFailed {
		t.Fatalf("the refused retry left the job %s", j.Status)
	}
}

func TestUniqueOptionsAreChecked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		r    runtime.EnqueueRequest
		want string
	}{
		{runtime.EnqueueRequest{Kind: "k", Payload: json.RawMessage(`{}`), EnqueueOptions: runtime.EnqueueOptions{UniqueWindow: time.Hour}}, "without a unique key"},
		{uniqueReq("k", "x", runtime.WithUniqueWindow(-time.Second)), "negative"},
		{uniqueReq("k", "x", runtime.WithUniqueStatuses("lost")), `unique status "lost" is not a status`},
		{uniqueReq("k", string(make([]byte, 1025))), "more than the 1024 allowed"},
	} {
		_, err := runtime.Enqueue(context.Background(), b.pool, c.r)
		var ee *runtime.EnqueueError
		if !errors.As(err, &ee) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an EnqueueError saying %q", c.r.EnqueueOptions, err, c.want)
		}
	}
}
