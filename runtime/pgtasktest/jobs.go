package pgtasktest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest/internal/harnessdb"
)

// WaitingJob is a job waiting to run, its payload decoded.
type WaitingJob[T any] struct {
	ID      runtime.JobID
	Queue   string
	Group   string // empty for an ungrouped job
	Status  runtime.Status
	Payload T
}

// Enqueued returns the jobs of kind waiting to run (queued, or scheduled
// for later), in enqueue order, their payloads decoded into T. Pass the
// generated kind constant: Enqueued[tasks.SendEmail](t, db,
// tasks.SendEmailKind). db may be the transaction the code under test
// enqueued in. A payload that does not decode into T fails the test.
func Enqueued[T any](t testing.TB, db runtime.DB, kind string) []WaitingJob[T] {
	t.Helper()
	rows, err := harnessdb.New(db).WaitingJobs(context.Background(), kind)
	if err != nil {
		t.Fatalf("pgtasktest: read the %s jobs: %v", kind, err)
	}
	out := make([]WaitingJob[T], len(rows))
	for i, r := range rows {
		out[i] = WaitingJob[T]{ID: runtime.JobID(r.ID), Queue: r.Queue, Group: r.GroupKey, Status: runtime.Status(r.Status)}
		if err := json.Unmarshal(r.Payload, &out[i].Payload); err != nil {
			t.Fatalf("pgtasktest: job %d of kind %s: payload %s does not decode into %T: %v", r.ID, kind, r.Payload, out[i].Payload, err)
		}
	}
	return out
}

// RequireEnqueued fails the test unless a job of kind waiting to run has
// a payload equal to want (compared decoded, every field: give the whole
// value), and returns that job. To check some fields only, filter
// Enqueued's jobs.
func RequireEnqueued[T any](t testing.TB, db runtime.DB, kind string, want T) WaitingJob[T] {
	t.Helper()
	jobs := Enqueued[T](t, db, kind)
	for _, j := range jobs {
		if reflect.DeepEqual(j.Payload, want) {
			return j
		}
	}
	t.Fatalf("pgtasktest: no %s job waiting with payload %+v; waiting: %s", kind, want, describe(jobs))
	return WaitingJob[T]{}
}

// RequireNotEnqueued fails the test if a job of kind waiting to run has a
// payload equal to want, every field. A job that differs in any field does
// not count: to rule out jobs by some fields, filter Enqueued's jobs.
func RequireNotEnqueued[T any](t testing.TB, db runtime.DB, kind string, want T) {
	t.Helper()
	for _, j := range Enqueued[T](t, db, kind) {
		if reflect.DeepEqual(j.Payload, want) {
			t.Fatalf("pgtasktest: job %d of kind %s is waiting with payload %+v", j.ID, kind, want)
		}
	}
}

func describe[T any](jobs []WaitingJob[T]) string {
	if len(jobs) == 0 {
		return "none"
	}
	s := ""
	for i, j := range jobs {
		if i == 10 {
			return s + fmt.Sprintf(" and %d more", len(jobs)-10)
		}
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%d %+v", j.ID, j.Payload)
	}
	return s
}
