package tasks_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/examples/tour/tasks"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// Fetch's tag gives each partner 5 slots: the generated EnqueueFetchMany
// admits 5 of a partner's 6 jobs and keeps the sixth waiting, another
// partner has slots of its own, and a job without a partner is refused.
// Once the jobs have run, every slot is free again.
func TestFetchIsLimitedPerPartner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtasktest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var acme []tasks.Fetch
	for i := range 6 {
		acme = append(acme, tasks.Fetch{Partner: "acme", URL: fmt.Sprintf("https://acme.example/%d", i)})
	}
	if _, err := tasks.EnqueueFetchMany(ctx, pool, acme); err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.EnqueueFetch(ctx, pool, tasks.Fetch{Partner: "globex", URL: "https://globex.example/"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.EnqueueFetch(ctx, pool, tasks.Fetch{URL: "https://nobody.example/"}); err == nil || !strings.Contains(err.Error(), "limit key Partner is empty") {
		t.Fatalf("enqueue without a partner: %v; want an error naming the empty key", err)
	}
	limits := func() []runtime.LimitInfo {
		t.Helper()
		infos, err := runtime.Limits(ctx, pool, "outbound", 0)
		if err != nil {
			t.Fatal(err)
		}
		return infos
	}
	want := []runtime.LimitInfo{
		{Queue: "outbound", Key: "acme", Declared: 5, Limit: 5, Free: 0, Waiting: 1},
		{Queue: "outbound", Key: "globex", Declared: 5, Limit: 5, Free: 4},
	}
	if got := limits(); !slices.Equal(got, want) {
		t.Fatalf("limits after enqueue:\n%+v\nwant\n%+v", got, want)
	}

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	w, err := runtime.NewWorker(ctx, cfg, runtime.Config{Queues: map[string]runtime.QueueConfig{"outbound": {}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	var fetched []string
	if err := tasks.HandleFetch(w, func(ctx context.Context, job *runtime.Job, f tasks.Fetch) error {
		fetched = append(fetched, f.URL)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if len(fetched) != 7 {
		t.Fatalf("fetched %d: %v; want all 7, the waiting one once a slot was free", len(fetched), fetched)
	}
	want[0].Free, want[0].Waiting, want[1].Free = 5, 0, 5
	if got := limits(); !slices.Equal(got, want) {
		t.Fatalf("limits after the jobs ran:\n%+v\nwant\n%+v", got, want)
	}
}
