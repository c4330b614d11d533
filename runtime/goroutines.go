package runtime

import (
	"context"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// goroutines runs short-lived work (a job's handler, a lease-mode run) on
// goroutines it keeps for the next piece. A new goroutine starts with a
// small stack, and decoding and validating a payload grow it, copying the
// stack at every doubling: in a drain of short lease-mode jobs, that
// copying took 7% of the machine's CPU. A kept goroutine keeps the stack it
// grew. One idle for keepIdle, or left when the worker stops, ends.
//
// Like a net/http server's connection goroutine, which runs one request
// after another, a kept goroutine carries what a handler leaves on it to
// the next: Handler's documentation asks handlers to undo what they change
// there. Profiler labels are reset after each piece of work.
type goroutines struct {
	idle     chan func()
	quit     chan struct{}
	stopOnce sync.Once
	// labels holds the context whose profiler labels each piece of work
	// starts with: Run's, so that work keeps the labels an application
	// runs the worker under.
	labels atomic.Pointer[context.Context]
}

// keepIdle is how long a kept goroutine waits for more work.
const keepIdle = 5 * time.Second

func newGoroutines() *goroutines {
	return &goroutines{idle: make(chan func()), quit: make(chan struct{})}
}

// labelFrom makes the profiler labels of ctx those each piece of work
// starts with.
func (g *goroutines) labelFrom(ctx context.Context) { g.labels.Store(&ctx) }

// do runs f on an idle kept goroutine, or on a new one.
func (g *goroutines) do(f func()) {
	select {
	case g.idle <- f:
	default:
		go g.keep(f)
	}
}

func (g *goroutines) keep(f func()) {
	t := time.NewTimer(keepIdle)
	defer t.Stop()
	for {
		f()
		f = nil // nothing of the last piece is kept alive while idle
		labels := context.Background()
		if ctx := g.labels.Load(); ctx != nil {
			labels = *ctx
		}
		pprof.SetGoroutineLabels(labels)
		select {
		case <-g.quit:
			return
		default:
		}
		t.Reset(keepIdle)
		select {
		case f = <-g.idle:
		case <-t.C:
			return
		case <-g.quit:
			return
		}
	}
}

// stop ends the idle goroutines, and the busy ones once their work is done.
// Work given after it still runs, each on a goroutine of its own.
func (g *goroutines) stop() { g.stopOnce.Do(func() { close(g.quit) }) }
