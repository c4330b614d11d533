package many

import "github.com/pgtask/pgtask/runtime"

type BadQueue struct {
	runtime.Task `task:"bad_queue,queue=,priority=x"`
}

type OtherBadResult struct {
	runtime.TaskWithResult[func()] `task:"other_bad_result"`
}

type BadRule struct {
	runtime.Task `task:"bad_rule"`
	To           string `json:"to" validate:"required,emial"`
}
