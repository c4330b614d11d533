package runtime

import "errors"

// Task marks a struct as a task: embed it, with the task's settings in the
// tag of the embedded field, and run `pgtask gen` (see docs/tasks.md):
//
//	type SendEmail struct {
//		runtime.Task `task:"send_email,queue=emails,max_attempts=5,timeout=30s"`
//		AccountID    int64  `json:"account_id" task:"group"`
//		To           string `json:"to" validate:"required,email"`
//	}
type Task struct{}

// TaskWithResult marks a task whose handler returns an R, stored with the
// job as JSON and read back by the generated Get<Task>Result.
type TaskWithResult[R any] struct{}

// ErrNoResult is wrapped by the error of a generated Get<Task>Result for a
// job that has not succeeded (yet): the status returned with it says where
// the job is.
var ErrNoResult = errors.New("pgtask: job has no result")
