package many

import "github.com/pgtask/pgtask/runtime"

// Every mistake of a package is reported in one run: several in one tag,
// several in one file, in more than one file, and in result types.
type TwoBadOptions struct {
	runtime.Task `task:"two,retries=3,timeout=soon"`
}

type BadResult struct {
	runtime.TaskWithResult[struct{ N int }] `task:"bad_result"`
}

type BadGroup struct {
	runtime.Task `task:"bad_group"`
	Score        float64 `task:"group"`
}
