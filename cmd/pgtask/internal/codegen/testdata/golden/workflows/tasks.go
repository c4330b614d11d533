// Package workflows covers workflow steps: tasks whose runtime.Input
// fields read the results of their parents.
package workflows

import "github.com/pgtask/pgtask/runtime"

type Page struct {
	HTML string `json:"html"`
}

type Doc struct {
	Title string `json:"title"`
}

type Fetch struct {
	runtime.TaskWithResult[Page] `task:"fetch"`
	URL                          string `json:"url" validate:"required"`
}

type Parse struct {
	runtime.TaskWithResult[Doc] `task:"parse"`
	Page                        runtime.Input[Page] `json:"page"`
}

// Merge reads two parents' results and returns none.
type Merge struct {
	runtime.Task `task:"merge"`
	First        runtime.Input[Doc]  `json:"first"`
	Raw          runtime.Input[Page] `json:"raw"`
	Note         string              `json:"note"`
}
