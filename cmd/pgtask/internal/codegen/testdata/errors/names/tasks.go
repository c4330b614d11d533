package names

import "github.com/pgtask/pgtask/runtime"

type Import struct {
	runtime.Task
}

// EnqueueImportMany would be generated twice: Enqueue<T>Many of Import
// and Enqueue<T> of ImportMany.
type ImportMany struct {
	runtime.Task
}

type ImportBatch struct {
	runtime.Task
}

type Invoice struct {
	runtime.Task
}

// RequestInvoice is the package's own, so the generator cannot write it.
func RequestInvoice() {}

type Report struct {
	runtime.TaskWithResult[int]
}

type ReportKind string

// URL and Url would both keep their settings in urlSpec.
type URL struct {
	runtime.Task
}

type Url struct {
	runtime.Task `task:"url2"`
}

// Request's Request<T> is RequestJob, which the package declares.
type Request struct {
	runtime.Task
}

type RequestJob struct{}

// Refund's Enqueue<T>Batch is declared by a test file of the package.
type Refund struct {
	runtime.Task
}
