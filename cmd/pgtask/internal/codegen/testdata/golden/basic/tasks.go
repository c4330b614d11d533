// Package basic is the generator's plainest input: a grouped task, an
// ungrouped one, one with a result, and Request, whose request function is
// RequestJob, not RequestRequest.
package basic

import "github.com/pgtask/pgtask/runtime"

type SendEmail struct {
	runtime.Task `task:"send_email,queue=emails,max_attempts=5,timeout=30s"`
	AccountID    int64  `json:"account_id" task:"group"`
	To           string `json:"to" validate:"required,email"`
	Subject      string `json:"subject" validate:"required,max=200"`
}

type ResizeImage struct {
	runtime.Task
	URL   string `json:"url" validate:"required,url"`
	Width int    `json:"width" validate:"gt=0"`
}

type Add struct {
	runtime.TaskWithResult[int] `task:"add"`
	A, B                        int
}

type Request struct {
	runtime.Task `task:"request"`
	URL          string `json:"url" validate:"required,url"`
}

// notATask has no marker and is left alone.
type notATask struct {
	Name string `task:"group"`
}
