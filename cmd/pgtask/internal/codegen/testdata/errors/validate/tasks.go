package validate

import "github.com/pgtask/pgtask/runtime"

// validate tags are checked with the validator's own parser, so a typo
// fails generation instead of the first enqueue.
type SendEmail struct {
	runtime.Task `task:"send_email"`
	To           string         `json:"to" validate:"required,emial"`
	Subject      string         `json:"subject" validate:"required,max=200"`
	Tags         []string       `json:"tags" validate:"dive,requird|lenn=3"`
	Empty        string         `json:"empty" validate:"required,,max=3"`
	Keys         map[string]int `json:"keys" validate:"keys,max=3"`
	Address      Address        `json:"address"`
	More         Addresses      `json:"more" validate:"dive"`
	Fine         string         `json:"fine" validate:"omitempty,email,iscolor"`
	Skipped      string         `json:"skipped" validate:"-"`
	hidden       string         `validate:"nonsense"`
}

// Address is checked too: the validator walks into it.
type Address struct {
	Zip  string   `json:"zip" validate:"required,numeric,lenn=5"`
	Next *Address `json:"next,omitempty"`
}

// Addresses holds the struct whose tags are checked.
type Addresses []Place

type Place struct {
	Name string `json:"name" validate:"requried"`
}

var _ = SendEmail{}.hidden
