package app_test

import (
	"context"
	"testing"

	"github.com/pgtask/pgtask/examples/tour/app"
	"github.com/pgtask/pgtask/examples/tour/tasks"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// docs/testing.md shows this test.

func TestSignupSendsWelcome(t *testing.T) {
	ctx := context.Background()
	pool := pgtasktest.NewPool(t)
	if err := app.Signup(ctx, pool, "a@example.com"); err != nil {
		t.Fatal(err)
	}
	welcome := tasks.SendEmail{To: "a@example.com", Subject: "Welcome"}
	job := pgtasktest.RequireEnqueued(t, pool, tasks.SendEmailKind, welcome)
	_ = job.ID // and Queue, Group, Status, the decoded Payload
	for _, j := range pgtasktest.Enqueued[tasks.SendEmail](t, pool, tasks.SendEmailKind) {
		if j.Payload.To == "b@example.com" {
			t.Errorf("mail to b enqueued: %+v", j.Payload)
		}
	}
}
