// Package tasks declares the tasks of the code the docs pages show:
// docs/tasks.md declares those in tasks.go, the other pages those here. The
// docs' code uses them, so that it compiles (docs/docs_test.go checks each
// page's code block against the file it comes from).
package tasks

import (
	"time"

	"github.com/pgtask/pgtask/runtime"
)

type Invite struct {
	runtime.Task `task:"invite,unique_window=24h"`
	Team         string `json:"team" task:"group,unique"`
	Email        string `json:"email" task:"unique" validate:"required,email"`
	Note         string `json:"note"` // not part of the key
}

// Report is the nightly report that docs/unique-and-periodic.md schedules.
type Report struct {
	runtime.Task `task:"report"`
	Day          time.Time `json:"day"`
}

// Fetch calls a partner's API: at most 5 calls at once per partner, across
// every worker (docs/limits.md).
type Fetch struct {
	runtime.Task `task:"fetch,queue=outbound,limit=5"`
	Partner      string `json:"partner" task:"limit"`
	URL          string `json:"url" validate:"required,url"`
}

// Render renders a page of an account's report. Accounts take turns in the
// queue, so one account's thousands of pages do not hold back another's
// few (docs/fairness.md).
type Render struct {
	runtime.Task `task:"render,queue=renders"`
	Account      string `json:"account" task:"tenant"`
	Page         int    `json:"page"`
}
