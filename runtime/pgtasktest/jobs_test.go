package pgtasktest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

type mail struct {
	To string `json:"to"`
}

// failures records what a helper would have failed a test with.
type failures struct {
	testing.TB
	msgs []string
}

func (f *failures) Helper() {}
func (f *failures) Fatalf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

func TestEnqueuedAndRequireEnqueued(t *testing.T) {
	t.Parallel()
	pool := pgtasktest.NewPool(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // rolled back on purpose
	for _, to := range []string{"a@example.com", "b@example.com"} {
		payload, _ := json.Marshal(mail{To: to})
		_, err := runtime.Enqueue(ctx, tx, runtime.EnqueueRequest{Kind: "mail", Payload: payload,
			EnqueueOptions: runtime.EnqueueOptions{Group: to}})
		if err != nil {
			t.Fatal(err)
		}
	}
	got := pgtasktest.Enqueued[mail](t, tx, "mail")
	if len(got) != 2 || got[0].Payload.To != "a@example.com" || got[1].Group != "b@example.com" || got[0].Status != runtime.StatusQueued {
		t.Fatalf("Enqueued: %+v", got)
	}
	if j := pgtasktest.RequireEnqueued(t, tx, "mail", mail{To: "b@example.com"}); j.ID != got[1].ID {
		t.Fatalf("RequireEnqueued returned job %d, want %d", j.ID, got[1].ID)
	}
	pgtasktest.RequireNotEnqueued(t, tx, "mail", mail{To: "c@example.com"})
	if n := len(pgtasktest.Enqueued[mail](t, pool, "mail")); n != 0 {
		t.Fatalf("%d jobs seen outside the transaction that has not committed", n)
	}

	f := &failures{TB: t}
	pgtasktest.RequireEnqueued(f, tx, "mail", mail{To: "c@example.com"})
	pgtasktest.RequireNotEnqueued(f, tx, "mail", mail{To: "a@example.com"})
	pgtasktest.Enqueued[[]int](f, tx, "mail")
	for i, want := range []string{
		"no mail job waiting with payload {To:c@example.com}; waiting: ",
		"is waiting with payload {To:a@example.com}",
		"does not decode into []int",
	} {
		if i >= len(f.msgs) || !strings.Contains(f.msgs[i], want) {
			t.Errorf("failure %d: %q, want it to say %q", i, f.msgs, want)
		}
	}
}
