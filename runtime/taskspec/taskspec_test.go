package taskspec_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
	"github.com/pgtask/pgtask/runtime/taskspec"
)

type region struct{ Name string }

func (r region) String() string { return r.Name }

type transfer struct {
	Owner *region `json:"owner"`
}

// What the generator writes for a pointer group field.
var transferSpec = &taskspec.Spec[transfer]{
	Kind:       "transfer",
	GroupField: "Owner",
	GroupKey: func(t transfer) string {
		if t.Owner == nil {
			return ""
		}
		return t.Owner.String()
	},
}

// A String method that panics, as one with a value receiver does when
// called through a nil pointer.
var panickySpec = &taskspec.Spec[transfer]{
	Kind:       "transfer",
	GroupField: "Owner",
	GroupKey:   func(t transfer) string { return t.Owner.String() },
}

// A group key that cannot be read is an error from Enqueue, never a panic
// in the caller, and nothing is inserted; WithGroup can stand in for it.
func TestUnreadableGroupKeyIsAnError(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), pgtasktest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ctx := context.Background()
	for spec, want := range map[*taskspec.Spec[transfer]]string{
		transferSpec: "group key Owner is empty",
		panickySpec:  "reading group key Owner panicked",
	} {
		if _, err := taskspec.Enqueue(ctx, pool, spec, transfer{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Enqueue = %v, want an error saying %q", err, want)
		}
		if _, err := taskspec.EnqueueMany(ctx, pool, spec, []transfer{{Owner: &region{"eu"}}, {}}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("EnqueueMany = %v, want an error saying %q", err, want)
		}
	}
	id, err := taskspec.Enqueue(ctx, pool, panickySpec, transfer{}, runtime.WithGroup("eu"))
	if err != nil {
		t.Fatalf("Enqueue with WithGroup: %v", err)
	}
	info, err := runtime.GetJob(ctx, pool, id)
	if err != nil || info.Group != "eu" {
		t.Fatalf("job %d: %+v, %v; want group eu", id, info, err)
	}
	if _, err := taskspec.Enqueue(ctx, pool, transferSpec, transfer{Owner: &region{"us"}}); err != nil {
		t.Fatal(err)
	}
}

type sync struct {
	Account string `json:"account"`
}

// What the generator writes for unique=payload,unique_window=1h.
var syncSpec = &taskspec.Spec[sync]{
	Kind:            "sync",
	Defaults:        runtime.EnqueueOptions{UniqueWindow: time.Hour},
	UniqueByPayload: true,
}

// A task unique by payload: the same value gets the same job, another value
// a job of its own; WithUniqueKey overrides the digest.
func TestUniqueByPayload(t *testing.T) {
	t.Parallel()
	pool := pgtasktest.NewPool(t)
	ctx := context.Background()
	enq := func(s sync, opts ...runtime.EnqueueOption) runtime.JobID {
		t.Helper()
		id, err := taskspec.Enqueue(ctx, pool, syncSpec, s, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	a1, a2, b := enq(sync{"a"}), enq(sync{"a"}), enq(sync{"b"})
	if a1 != a2 || a1 == b {
		t.Fatalf("ids %d, %d for the same payload and %d for another; want the first two equal", a1, a2, b)
	}
	if own := enq(sync{"a"}, runtime.WithUniqueKey("mine")); own == a1 || enq(sync{"c"}, runtime.WithUniqueKey("mine")) != own {
		t.Fatal("WithUniqueKey did not override the payload's digest")
	}
	info, err := runtime.GetJob(ctx, pool, a1)
	if err != nil || !strings.HasPrefix(info.UniqueKey, "4:sync:") || !strings.Contains(info.UniqueKey, ":payload:") {
		t.Fatalf("unique key %q, %v", info.UniqueKey, err)
	}
}

type invite struct {
	Team  string         `json:"team"`
	Email string         `json:"email"`
	Note  string         `json:"note"`
	Tags  map[string]int `json:"tags"`
}

// What the generator writes for a task with task:"unique" on Team, Email
// and Tags.
var inviteSpec = &taskspec.Spec[invite]{
	Kind:         "invite",
	UniqueFields: []string{"Team", "Email", "Tags"},
	UniqueValues: func(t invite) []any { return []any{t.Team, t.Email, t.Tags} },
}

// A task unique by some fields: jobs whose unique fields are equal share a
// job whatever their other fields (maps compare by content, not by order),
// a change in any unique field makes a new one, and long values make a
// digest of fixed length.
func TestUniqueByFields(t *testing.T) {
	t.Parallel()
	pool := pgtasktest.NewPool(t)
	ctx := context.Background()
	enq := func(i invite) runtime.JobID {
		t.Helper()
		id, err := taskspec.Enqueue(ctx, pool, inviteSpec, i)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	first := enq(invite{Team: "red", Email: "a@x", Note: "hi", Tags: map[string]int{"a": 1, "b": 2}})
	same := enq(invite{Team: "red", Email: "a@x", Note: "other note", Tags: map[string]int{"b": 2, "a": 1}})
	if same != first {
		t.Fatalf("equal unique fields made jobs %d and %d", first, same)
	}
	for _, other := range []invite{
		{Team: "blue", Email: "a@x", Tags: map[string]int{"a": 1, "b": 2}},
		{Team: "red", Email: "b@x", Tags: map[string]int{"a": 1, "b": 2}},
		{Team: "red", Email: "a@x"},
		// The fields' boundary is kept: "re" + "da@x" is not "red" + "a@x".
		{Team: "re", Email: "da@x", Tags: map[string]int{"a": 1, "b": 2}},
	} {
		if id := enq(other); id == first {
			t.Fatalf("%+v got the first job's id", other)
		}
	}
	info, err := runtime.GetJob(ctx, pool, first)
	if err != nil || !strings.HasSuffix(info.UniqueKey, `fields:["red","a@x",{"a":1,"b":2}]`) {
		t.Fatalf("unique key %q, %v", info.UniqueKey, err)
	}
	long := invite{Team: strings.Repeat("t", 5000), Email: "a@x"}
	if a, b := enq(long), enq(long); a != b {
		t.Fatalf("a long key made jobs %d and %d", a, b)
	}
	info, err = runtime.GetJob(ctx, pool, enq(long))
	if err != nil || !strings.Contains(info.UniqueKey, "fields-sha256:") || len(info.UniqueKey) > 100 {
		t.Fatalf("long unique key %q, %v; want a digest", info.UniqueKey, err)
	}
}

type upload struct {
	File string `json:"file"`
}

// poolAndWorker returns a pool on a new database and a worker of the
// default Config on it, both closed when the test ends.
func poolAndWorker(t *testing.T) (*pgxpool.Pool, *runtime.Worker) {
	t.Helper()
	pool := pgtasktest.NewPool(t)
	w, err := runtime.NewWorker(context.Background(), pool.Config(), runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return pool, w
}

// What the generator writes for max_snoozes=2.
var uploadSpec = &taskspec.Spec[upload]{Kind: "upload", MaxSnoozes: 2}

// The task's cap on snoozes reaches its handler's registration: the third
// snooze of a job fails it, saying so, and GetJob shows the count.
func TestMaxSnoozesReachesTheRegistration(t *testing.T) {
	t.Parallel()
	pool, w := poolAndWorker(t)
	ctx := context.Background()
	if err := taskspec.Handle(w, uploadSpec, func(context.Context, *runtime.Job, upload) error {
		return runtime.Snooze(0)
	}); err != nil {
		t.Fatal(err)
	}
	id, err := taskspec.Enqueue(ctx, pool, uploadSpec, upload{File: "a.csv"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := runtime.GetJob(ctx, pool, id)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != runtime.StatusFailed || info.Snoozes != 3 || info.Attempts != 1 ||
		len(info.Errors) != 1 || info.Errors[0].Error != "snoozed 3 times, cap 2" {
		t.Fatalf("job: %s, attempts %d, snoozes %d, errors %+v; want failed after 1 attempt and 3 snoozes, \"snoozed 3 times, cap 2\"",
			info.Status, info.Attempts, info.Snoozes, info.Errors)
	}
}

type fetch struct {
	Partner *region `json:"partner"`
}

// What the generator writes for limit=2 and a pointer field tagged
// task:"limit".
var fetchSpec = &taskspec.Spec[fetch]{
	Kind:       "fetch",
	Defaults:   runtime.EnqueueOptions{Queue: "outbound", Limit: 2},
	LimitField: "Partner",
	LimitKey: func(t fetch) string {
		if t.Partner == nil {
			return ""
		}
		return t.Partner.String()
	},
}

// A limit key that panics when read.
var panickyFetchSpec = &taskspec.Spec[fetch]{
	Kind:       "fetch",
	Defaults:   runtime.EnqueueOptions{Queue: "outbound", Limit: 2},
	LimitField: "Partner",
	LimitKey:   func(t fetch) string { return t.Partner.String() },
}

// The limit key field's value is the key the declared limit counts by;
// an empty or unreadable one is refused, with nothing inserted, unless
// WithLimit says which limit the job is under.
func TestLimitKeyFromAField(t *testing.T) {
	t.Parallel()
	pool := pgtasktest.NewPool(t)
	ctx := context.Background()
	declared := func() map[string]int {
		t.Helper()
		infos, err := runtime.Limits(ctx, pool, "outbound", 0)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, in := range infos {
			out[in.Key] = in.Declared
		}
		return out
	}
	if _, err := taskspec.Enqueue(ctx, pool, fetchSpec, fetch{Partner: &region{"eu"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := taskspec.EnqueueMany(ctx, pool, fetchSpec, []fetch{{Partner: &region{"us"}}, {Partner: &region{"eu"}}}); err != nil {
		t.Fatal(err)
	}
	if got, want := declared(), map[string]int{"eu": 2, "us": 2}; !maps.Equal(got, want) {
		t.Fatalf("limits %v, want %v", got, want)
	}
	for spec, want := range map[*taskspec.Spec[fetch]]string{
		fetchSpec:        "limit key Partner is empty",
		panickyFetchSpec: "reading limit key Partner panicked",
	} {
		if _, err := taskspec.Enqueue(ctx, pool, spec, fetch{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Enqueue = %v, want an error saying %q", err, want)
		}
		if _, err := taskspec.EnqueueMany(ctx, pool, spec, []fetch{{Partner: &region{"apac"}}, {}}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("EnqueueMany = %v, want an error saying %q", err, want)
		}
	}
	if got, want := declared(), map[string]int{"eu": 2, "us": 2}; !maps.Equal(got, want) {
		t.Fatalf("after refused enqueues, limits %v, want %v", got, want)
	}
	// The caller's WithLimit stands in for the field: another key, the
	// queue's own limit, or none.
	for _, opt := range []runtime.EnqueueOption{runtime.WithLimit("apac", 1), runtime.WithLimit("", 3), runtime.WithLimit("", 0)} {
		if _, err := taskspec.Enqueue(ctx, pool, panickyFetchSpec, fetch{}, opt); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := declared(), map[string]int{"eu": 2, "us": 2, "apac": 1, "": 3}; !maps.Equal(got, want) {
		t.Fatalf("after WithLimit, limits %v, want %v", got, want)
	}
}

type invoice struct {
	Customer string `json:"customer" validate:"required"`
	Cents    int64  `json:"cents" validate:"gt=0"`
}

var invoiceSpec = &taskspec.Spec[invoice]{Kind: "invoice"}

// Request's validation error names the kind and each field, as Enqueue's
// does, and is the *runtime.ValidationError itself: a request is not
// enqueued, so it is no *runtime.EnqueueError with a place in a batch.
func TestRequestValidationNamesTheKindAndFields(t *testing.T) {
	t.Parallel()
	_, err := taskspec.Request(invoiceSpec, invoice{})
	const want = "invalid invoice: customer fails required; cents fails gt=0"
	if err == nil || err.Error() != want {
		t.Fatalf("Request of an empty invoice: %v; want %q", err, want)
	}
	var ee *runtime.EnqueueError
	if errors.As(err, &ee) {
		t.Errorf("Request's error is an *EnqueueError (index %d); want the validation error alone", ee.Index)
	}
	var ve *runtime.ValidationError
	if !errors.As(err, &ve) || ve.Kind != "invoice" || len(ve.Fields) != 2 || ve.Fields[0].Field != "customer" || ve.Fields[1].Field != "cents" {
		t.Errorf("Request's error: %#v; want a *ValidationError of invoice naming customer and cents", err)
	}
	req, err := taskspec.Request(invoiceSpec, invoice{Customer: "ann", Cents: 5})
	if err != nil || req.Kind != "invoice" || string(req.Payload) != `{"customer":"ann","cents":5}` {
		t.Errorf("Request of a valid invoice: %+v, %v", req, err)
	}
}

type merge struct {
	First runtime.Input[int] `json:"first"`
}

// What the generator writes for a task with an Input field.
var mergeSpec = &taskspec.Spec[merge]{Kind: "merge"}

// A job of a task with Input fields enqueued outside a workflow, typed (the
// spec's Enqueue) or untyped (runtime.Enqueue with a payload that sets no
// input, or one that names a step), has no parent to read: its handler's
// Get fails for good, saying the job was not enqueued as a workflow step.
func TestInputOfAJobEnqueuedOutsideAWorkflow(t *testing.T) {
	t.Parallel()
	pool, w := poolAndWorker(t)
	ctx := context.Background()
	if err := taskspec.Handle(w, mergeSpec, func(ctx context.Context, job *runtime.Job, m merge) error {
		_, err := m.First.Get(ctx, job)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	typed, err := taskspec.Enqueue(ctx, pool, mergeSpec, merge{})
	if err != nil {
		t.Fatal(err)
	}
	untyped, err := runtime.Enqueue(ctx, pool, runtime.EnqueueRequest{Kind: "merge", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	// An input that names a step, as a step's payload copied into a job of
	// no workflow has it.
	copied, err := runtime.Enqueue(ctx, pool, runtime.EnqueueRequest{Kind: "merge", Payload: []byte(`{"first":{"pgtask_step":0}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[runtime.JobID]string{
		typed:   "the workflow input is not set: the job was not enqueued as a workflow step with its inputs set",
		untyped: "the workflow input is not set: the job was not enqueued as a workflow step with its inputs set",
		copied:  "its input names step 0 of its workflow, but the job was not enqueued as a workflow step",
	} {
		info, err := runtime.GetJob(ctx, pool, id)
		if err != nil {
			t.Fatal(err)
		}
		want = fmt.Sprintf("job %d: %s", id, want)
		if info.Status != runtime.StatusFailed || info.Attempts != 1 || len(info.Errors) != 1 || !strings.HasPrefix(info.Errors[0].Error, want) {
			t.Errorf("job %d: %s after %d attempts, errors %+v; want failed after 1 attempt with an error starting %q",
				id, info.Status, info.Attempts, info.Errors, want)
		}
	}
}

// A unique task's key comes from its declaration: WithUniqueKey("") cannot
// clear it, which would make the job silently not unique. Enqueue,
// EnqueueMany and Request refuse it with an error naming the kind, and
// nothing is inserted; a key of the caller's own still replaces it.
func TestUniqueKeyCannotBeCleared(t *testing.T) {
	t.Parallel()
	pool := pgtasktest.NewPool(t)
	ctx := context.Background()
	clear := runtime.WithUniqueKey("")
	checkErr := func(what string, err error, kind, from string) {
		t.Helper()
		want := kind + `: its unique key comes from its declaration (` + from + `); WithUniqueKey("") cannot clear it`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s with WithUniqueKey(\"\"): %v; want an error saying %q", what, err, want)
		}
	}
	_, err := taskspec.Enqueue(ctx, pool, syncSpec, sync{"a"}, clear)
	checkErr("Enqueue of sync", err, "sync", "its payload")
	_, err = taskspec.EnqueueMany(ctx, pool, syncSpec, []sync{{"a"}, {"b"}}, clear)
	checkErr("EnqueueMany of sync", err, "sync", "its payload")
	_, err = taskspec.Request(syncSpec, sync{"a"}, clear)
	checkErr("Request of sync", err, "sync", "its payload")
	_, err = taskspec.Enqueue(ctx, pool, inviteSpec, invite{Team: "red", Email: "a@x"}, clear)
	checkErr("Enqueue of invite", err, "invite", "fields Team, Email, Tags")
	_, err = taskspec.EnqueueMany(ctx, pool, inviteSpec, []invite{{Team: "red", Email: "a@x"}}, clear)
	checkErr("EnqueueMany of invite", err, "invite", "fields Team, Email, Tags")
	if n, err := runtime.CountJobs(ctx, pool, runtime.JobFilter{}); err != nil || n != 0 {
		t.Fatalf("%d jobs inserted by refused enqueues (%v)", n, err)
	}
	// A key of the caller's own, then the key cleared after it, as options
	// apply in order.
	a, err := taskspec.Enqueue(ctx, pool, inviteSpec, invite{Team: "red"}, runtime.WithUniqueKey("mine"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := taskspec.Enqueue(ctx, pool, inviteSpec, invite{Team: "blue"}, runtime.WithUniqueKey("mine")); err != nil || b != a {
		t.Fatalf("the same key of the caller's own made jobs %d and %d (%v)", a, b, err)
	}
	_, err = taskspec.Enqueue(ctx, pool, inviteSpec, invite{Team: "red"}, runtime.WithUniqueKey("mine"), clear)
	checkErr("Enqueue of invite with a key then none", err, "invite", "fields Team, Email, Tags")
}
