// Package app is the application that docs/testing.md tests: signing up
// enqueues a welcome mail.
package app

import (
	"context"

	"github.com/pgtask/pgtask/examples/tour/tasks"
	"github.com/pgtask/pgtask/runtime"
)

// Signup signs email up and enqueues its welcome mail, in db's transaction
// when db is one.
func Signup(ctx context.Context, db runtime.DB, email string) error {
	_, err := tasks.EnqueueSendEmail(ctx, db, tasks.SendEmail{To: email, Subject: "Welcome"})
	return err
}
