// Package options covers every tag option and every kind of group field.
package options

import (
	"fmt"

	"github.com/pgtask/pgtask/runtime"
)

type AccountID uint32

type Region struct{ Code string }

func (r Region) String() string { return r.Code }

// HTTPRequest gets its kind from its name: http_request.
type HTTPRequest struct {
	runtime.Task `task:",queue=outbound,priority=-5,aging=off,backoff=500ms..2h,on_fail=block"`
	Host         string `json:"host" task:"group"`
	Path         string `json:"path"`
}

type Charge struct {
	runtime.Task `task:"billing.charge,max_attempts=1,max_snoozes=500,on_fail=skip,backoff=3s,timeout=90s,mode=held"`
	Account      AccountID `json:"account" task:"group"`
	Cents        int64     `json:"cents" validate:"gt=0"`
}

type Rebalance struct {
	runtime.Task `task:"rebalance,priority=7,aging=250ms,timeout=1500ms,mode=lease"`
	Region       Region `json:"region" task:"group"`
}

// Owner's group field is a pointer whose String has a value receiver: a nil
// one must not reach String.
type Transfer struct {
	runtime.Task `task:"transfer"`
	Owner        *Region `json:"owner" task:"group"`
}

type Shard struct {
	runtime.Task `task:"shard"`
	N            int8 `json:"n" task:"group"`
}

var _ fmt.Stringer = Region{}

// Sync is unique by its payload for an hour, successes and failures
// included.
type Sync struct {
	runtime.Task `task:"sync,unique=payload,unique_window=1h,unique_statuses=succeeded+failed"`
	Account      string `json:"account"`
}

// Invite is unique by its team and address for a day: inviting the same
// address to the same team twice in a day makes one job.
type Invite struct {
	runtime.Task `task:"invite,unique_window=24h"`
	Team         string `json:"team" task:"group,unique"`
	Email        string `json:"email" task:"unique"`
	Note         string `json:"note"`
}
