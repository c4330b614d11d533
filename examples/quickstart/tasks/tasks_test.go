package tasks_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/examples/quickstart/tasks"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// The generated functions end to end against a real database: typed
// enqueue, typed handlers, typed results, validation on both sides.

func setup(t *testing.T) (*pgxpool.Pool, *runtime.Worker) {
	t.Helper()
	url := pgtasktest.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	w, err := runtime.NewWorker(context.Background(), cfg, runtime.Config{
		Queues:              map[string]runtime.QueueConfig{"default": {}, "emails": {}},
		MaintenanceInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return pool, w
}

func run(t *testing.T, w *runtime.Worker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		w.Close()
	})
}

func waitFinished(t *testing.T, pool *pgxpool.Pool, id runtime.JobID) *runtime.JobInfo {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		info, err := runtime.GetJob(context.Background(), pool, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.Status.Finished() {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d still %s", id, info.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTypedEnqueueHandleAndResult(t *testing.T) {
	t.Parallel()
	pool, w := setup(t)
	ctx := context.Background()
	got := make(chan tasks.SendEmail, 1)
	if err := tasks.HandleSendEmail(w, func(ctx context.Context, job *runtime.Job, e tasks.SendEmail) error {
		got <- e
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := tasks.HandleAdd(w, func(ctx context.Context, job *runtime.Job, in tasks.Add) (tasks.Sum, error) {
		return tasks.Sum{Value: in.A + in.B}, nil
	}); err != nil {
		t.Fatal(err)
	}

	email := tasks.SendEmail{AccountID: 7, To: "a@example.com", Subject: "hello"}
	emailID, err := tasks.EnqueueSendEmail(ctx, pool, email)
	if err != nil {
		t.Fatal(err)
	}
	sumID, err := tasks.EnqueueAdd(ctx, pool, tasks.Add{A: 40, B: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Before a worker runs it there is no result, and the status says why.
	if _, status, err := tasks.GetAddResult(ctx, pool, sumID); !errors.Is(err, runtime.ErrNoResult) || status != runtime.StatusQueued {
		t.Fatalf("result before running: %s, %v; want queued and ErrNoResult", status, err)
	}
	info, err := runtime.GetJob(ctx, pool, emailID)
	if err != nil || info.Kind != tasks.SendEmailKind || info.Queue != "emails" || info.Group != "7" || info.MaxAttempts != 5 {
		t.Fatalf("stored job: %+v, %v; want the tag's settings and group 7", info, err)
	}

	run(t, w)
	if e := <-got; e != email {
		t.Fatalf("handler got %+v, want %+v", e, email)
	}
	waitFinished(t, pool, sumID)
	sum, status, err := tasks.GetAddResult(ctx, pool, sumID)
	if err != nil || status != runtime.StatusSucceeded || sum.Value != 42 {
		t.Fatalf("result: %+v, %s, %v; want {42}, succeeded", sum, status, err)
	}
	if _, _, err := tasks.GetAddResult(ctx, pool, emailID); err == nil || !strings.Contains(err.Error(), "is a send_email job, not add") {
		t.Fatalf("reading an add result from a send_email job: %v", err)
	}
}

func TestValidationNamesFieldAndRuleAndInsertsNothing(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t)
	ctx := context.Background()
	_, err := tasks.EnqueueSendEmail(ctx, pool, tasks.SendEmail{AccountID: 1, To: "nope", Subject: strings.Repeat("s", 201)})
	var ve *runtime.ValidationError
	if !errors.As(err, &ve) || len(ve.Fields) != 2 ||
		ve.Fields[0] != (runtime.FieldError{Field: "to", Rule: "email"}) ||
		ve.Fields[1] != (runtime.FieldError{Field: "subject", Rule: "max", Param: "200"}) {
		t.Fatalf("err = %v (%#v)", err, ve)
	}
	if err.Error() != "enqueue: invalid send_email: to fails email; subject fails max=200" {
		t.Fatalf("message: %q", err.Error())
	}

	emails := []tasks.SendEmail{
		{AccountID: 1, To: "a@example.com", Subject: "1"},
		{AccountID: 1, To: "b@example.com", Subject: "2"},
		{AccountID: 1, To: "c@example.com"}, // no subject
		{AccountID: 1, To: "d@example.com", Subject: "4"},
	}
	_, err = tasks.EnqueueSendEmailMany(ctx, pool, emails)
	var ee *runtime.EnqueueError
	if !errors.As(err, &ee) || ee.Index != 2 || !strings.Contains(err.Error(), "item 2 of the batch") || !strings.Contains(err.Error(), "subject fails required") {
		t.Fatalf("err = %v", err)
	}
	if _, err := tasks.EnqueueResizeImage(ctx, pool, tasks.ResizeImage{URL: "https://x/y.png", Width: 0}); err == nil ||
		!strings.Contains(err.Error(), "width fails gt=0") {
		t.Fatalf("err = %v", err)
	}
	for id := runtime.JobID(1); id < 10; id++ {
		if _, err := runtime.GetJob(ctx, pool, id); !errors.Is(err, runtime.ErrJobNotFound) {
			t.Fatalf("job %d exists after refused enqueues (%v)", id, err)
		}
	}
}

func TestEnqueueManyKeepsGroupOrderAndJoinsTransactions(t *testing.T) {
	t.Parallel()
	pool, w := setup(t)
	ctx := context.Background()
	var order []string
	seen := make(chan struct{}, 10)
	if err := tasks.HandleSendEmail(w, func(ctx context.Context, job *runtime.Job, e tasks.SendEmail) error {
		order = append(order, e.Subject) // one group: never two at once
		seen <- struct{}{}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.EnqueueSendEmail(ctx, tx, tasks.SendEmail{AccountID: 9, To: "x@example.com", Subject: "rolled back"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var emails []tasks.SendEmail
	for _, s := range []string{"a", "b", "c", "d", "e"} {
		emails = append(emails, tasks.SendEmail{AccountID: 9, To: "x@example.com", Subject: s})
	}
	ids, err := tasks.EnqueueSendEmailMany(ctx, pool, emails)
	if err != nil || len(ids) != 5 {
		t.Fatal(ids, err)
	}
	run(t, w)
	for range 5 {
		select {
		case <-seen:
		case <-time.After(15 * time.Second):
			t.Fatal("emails did not all run")
		}
	}
	waitFinished(t, pool, ids[4])
	if got := strings.Join(order, ""); got != "abcde" {
		t.Fatalf("ran %q, want abcde (and never the rolled-back one)", got)
	}
}

// A row that bypassed the generated Enqueue (written by hand, by older code)
// with a payload that does not decode or does not validate fails at once,
// without reaching the handler and without retries.
func TestMalformedRowsFailWithoutReachingTheHandler(t *testing.T) {
	t.Parallel()
	pool, w := setup(t)
	ctx := context.Background()
	called := make(chan struct{}, 2)
	if err := tasks.HandleSendEmail(w, func(ctx context.Context, job *runtime.Job, e tasks.SendEmail) error {
		called <- struct{}{}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	raw := func(payload string) runtime.JobID {
		req := runtime.EnqueueRequest{Kind: tasks.SendEmailKind, Payload: json.RawMessage(payload)}
		req.Apply(runtime.WithQueue("emails"), runtime.WithMaxAttempts(5))
		id, err := runtime.Enqueue(ctx, pool, req)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	wrongType := raw(`{"account_id": "seven", "to": "a@example.com", "subject": "x"}`)
	invalid := raw(`{"account_id": 7, "to": "not an address", "subject": "x"}`)
	run(t, w)
	for id, want := range map[runtime.JobID]string{
		wrongType: "decode payload of job",
		invalid:   "invalid send_email: to fails email",
	} {
		info := waitFinished(t, pool, id)
		if info.Status != runtime.StatusFailed || info.Attempts != 1 || len(info.Errors) != 1 || !strings.Contains(info.Errors[0].Error, want) {
			t.Errorf("job %d: %s after %d attempts, errors %+v; want failed at once with %q", id, info.Status, info.Attempts, info.Errors, want)
		}
	}
	select {
	case <-called:
		t.Fatal("the handler ran for a malformed row")
	default:
	}
}
