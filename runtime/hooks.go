package runtime

import (
	"context"
	"maps"
	"sync"
)

// Middleware runs around each attempt's handler, in both modes: in the
// handler's goroutine, under its timeout, with panics recovered as the
// handler's are. It may add to the context (a trace span), time, count or
// log the attempt, change the job it passes on (decrypt job.Payload), or
// end the attempt without calling next; the attempt's outcome is what it
// returns. Config.Middleware lists them outermost first.
type Middleware func(ctx context.Context, job *Job, next Handler) error

// EnqueueHook runs on each request of Enqueue, EnqueueMany and
// EnqueueResults before the request is checked: it may change it (add a
// trace context to the payload, encrypt it, set a default priority) or
// refuse it with an error, which fails the whole call before anything is
// inserted. Hooks run in the order they were added. req.Metadata is the
// request's own copy: a hook may add to it (a nil map has to be made first).
type EnqueueHook func(ctx context.Context, req *EnqueueRequest) error

var enqueueHooks struct {
	mu    sync.RWMutex
	hooks []EnqueueHook
}

// AddEnqueueHook adds h to the hooks every enqueue in this process runs.
// Add hooks at start-up, before enqueueing; they are never removed.
func AddEnqueueHook(h EnqueueHook) {
	if h == nil {
		return
	}
	enqueueHooks.mu.Lock()
	defer enqueueHooks.mu.Unlock()
	enqueueHooks.hooks = append(enqueueHooks.hooks, h)
}

// runEnqueueHooks runs the hooks on req.
func runEnqueueHooks(ctx context.Context, req *EnqueueRequest) error {
	enqueueHooks.mu.RLock()
	hooks := enqueueHooks.hooks
	enqueueHooks.mu.RUnlock()
	if len(hooks) > 0 {
		// A hook may add to the metadata: the caller's map, which other
		// requests may share, stays as it was.
		req.Metadata = maps.Clone(req.Metadata)
	}
	for _, h := range hooks {
		if err := h(ctx, req); err != nil {
			return err
		}
	}
	return nil
}
