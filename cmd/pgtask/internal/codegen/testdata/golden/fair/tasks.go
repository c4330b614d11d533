// Package fair covers fair queues: a task whose tenant is a field, one of
// the same queue that runs as tenant "", and a grouped one.
package fair

import "github.com/pgtask/pgtask/runtime"

type AccountID int64

// Render takes turns with the other accounts of its queue.
type Render struct {
	runtime.Task `task:"render,queue=renders"`
	Account      AccountID `json:"account" task:"tenant"`
	Page         string    `json:"page" validate:"required"`
}

// Sweep runs in the same fair queue as tenant "".
type Sweep struct {
	runtime.Task `task:"sweep,queue=renders,fair=on"`
	Older        int `json:"older"`
}

// Sync runs in order per document, and its documents' tenants take turns.
type Sync struct {
	runtime.Task `task:"sync,queue=syncs,limit=2"`
	Tenant       string `json:"tenant" task:"tenant,limit"`
	Doc          string `json:"doc"`
}
