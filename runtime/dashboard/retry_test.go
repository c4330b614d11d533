package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/dashboard"
)

// A retry that a unique key keeps from happening (another job holds the key
// now) is the job's state, not the dashboard's failure: the page names the
// job that holds the key, and a bulk retry retries the others and says how
// many it left.
func TestRetryWhereAnotherJobHoldsTheUniqueKey(t *testing.T) {
	t.Parallel()
	s := seed(t)
	ctx := context.Background()
	enq := func(key string, delay time.Duration) runtime.JobID {
		t.Helper()
		id, err := runtime.Enqueue(ctx, s.pool, runtime.EnqueueRequest{Kind: "sync_account", Payload: []byte(`{}`),
			EnqueueOptions: runtime.EnqueueOptions{Queue: "accounts", UniqueKey: key, Delay: delay}})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	a, b, c := enq("a", 0), enq("b", 0), enq("c", 0)
	w, err := runtime.NewWorker(ctx, mustConfig(t, s.pool), runtime.Config{
		Queues: map[string]runtime.QueueConfig{"accounts": {}},
		Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	must(t, w.Register(runtime.Registration{Kind: "sync_account", Queue: "accounts", Handler: func(context.Context, *runtime.Job) error {
		return runtime.NoRetry(errors.New("account locked"))
	}}))
	if _, err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	// Jobs a and b fail for good; new jobs take their keys.
	holderA, _ := enq("a", time.Hour), enq("b", time.Hour)

	cl := newDashboard(t, s, dashboard.Options{})
	back := "/jobs?queue=accounts"
	form := func(kv ...string) url.Values {
		v := url.Values{"csrf": {cl.token(back)}, "back": {back}}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}

	resp, body := cl.post(fmt.Sprintf("/jobs/%d/retry", a), form())
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || loc.Query().Get("done") != "not-retried-unique" {
		t.Fatalf("retry of job %d whose key job %d holds: %s, Location %q, %q; want 303 with done=not-retried-unique", a, holderA, resp.Status, loc, body)
	}
	want := fmt.Sprintf("Job #%d was not retried: job #%d holds its unique key now.", a, holderA)
	if page := text(cl.get(loc.String())); !strings.Contains(page, want) {
		t.Errorf("the page after the refused retry lacks %q:\n%s", want, page)
	}
	if st := s.status(t, a); st != runtime.StatusFailed {
		t.Errorf("the refused retry left job %d %s, want failed", a, st)
	}

	resp, body = cl.post("/jobs/retry", form("queue", "accounts", "status", "failed"))
	loc, _ = url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || loc.Query().Get("done") != "retried-many-held" {
		t.Fatalf("bulk retry: %s, Location %q, %q; want 303 with done=retried-many-held", resp.Status, loc, body)
	}
	want = "Retried 1 jobs. 2 others were not retried: other jobs hold their unique keys now"
	if page := text(cl.get(loc.String())); !strings.Contains(page, want) {
		t.Errorf("the page after the bulk retry lacks %q:\n%s", want, page)
	}
	for id, st := range map[runtime.JobID]runtime.Status{a: runtime.StatusFailed, b: runtime.StatusFailed, c: runtime.StatusQueued} {
		if got := s.status(t, id); got != st {
			t.Errorf("after the bulk retry job %d is %s, want %s", id, got, st)
		}
	}
}

func mustConfig(t *testing.T, pool *pgxpool.Pool) *pgxpool.Config {
	t.Helper()
	pc, err := pgxpool.ParseConfig(pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	return pc
}
