package tasks

import "github.com/pgtask/pgtask/runtime"

//go:generate go run github.com/pgtask/pgtask/cmd/pgtask gen

type SendEmail struct {
	runtime.Task `task:"send_email,queue=emails,max_attempts=5,timeout=30s"`
	AccountID    int64  `json:"account_id" task:"group"`
	To           string `json:"to" validate:"required,email"`
	Subject      string `json:"subject" validate:"required,max=200"`
}

// A task with a result embeds runtime.TaskWithResult[R] instead.
type Add struct {
	runtime.TaskWithResult[Sum] `task:"add"`
	A, B                        int
}

type Sum struct{ Value int }
