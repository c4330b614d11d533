// Package tasks declares the quickstart's tasks. `go generate` turns them into
// the typed functions in pgtask_gen.go.
package tasks

import "github.com/pgtask/pgtask/runtime"

//go:generate go run github.com/pgtask/pgtask/cmd/pgtask gen

// SendEmail goes out one at a time per account, in the order enqueued.
type SendEmail struct {
	runtime.Task `task:"send_email,queue=emails,max_attempts=5,timeout=30s,backoff=200ms..1m"`
	AccountID    int64  `json:"account_id" task:"group"`
	To           string `json:"to" validate:"required,email"`
	Subject      string `json:"subject" validate:"required,max=200"`
}

// ResizeImage jobs run concurrently.
type ResizeImage struct {
	runtime.Task `task:"resize_image,timeout=2m"`
	URL          string `json:"url" validate:"required,url"`
	Width        int    `json:"width" validate:"gt=0,lte=8192"`
}

// Add returns a result, stored with the job.
type Add struct {
	runtime.TaskWithResult[Sum] `task:"add"`
	A                           int `json:"a"`
	B                           int `json:"b"`
}

// Sum is Add's result.
type Sum struct {
	Value int `json:"value"`
}
