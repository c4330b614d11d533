// Package limits covers concurrency limits: the queue's own, and one per
// key read from each kind of limit key field.
package limits

import "github.com/pgtask/pgtask/runtime"

type Partner struct{ Name string }

func (p *Partner) String() string { return p.Name }

type TenantID int64

// Export runs at most 3 at once in its queue.
type Export struct {
	runtime.Task `task:"export,queue=exports,limit=3"`
	Table        string `json:"table"`
}

// Fetch runs at most 5 at once per partner; a nil Partner has no key.
type Fetch struct {
	runtime.Task `task:"fetch,queue=outbound,limit=5,priority=2"`
	Partner      *Partner `json:"partner" task:"limit"`
	URL          string   `json:"url" validate:"required,url"`
}

// Reindex runs one at a time per tenant, one job per tenant and table is
// enough, and of those that find the tenant busy only the newest waits.
type Reindex struct {
	runtime.Task `task:"reindex,limit=1,on_limit=keep_newest"`
	Tenant       TenantID `json:"tenant" task:"limit,unique"`
	Table        string   `json:"table" task:"unique"`
}

// Resize runs at most 2147483647 at once per bucket: the largest limit.
type Resize struct {
	runtime.Task `task:"resize,limit=2147483647"`
	Bucket       string `json:"bucket" task:"limit"`
	Width        uint16 `json:"width" task:"unique"`
}
