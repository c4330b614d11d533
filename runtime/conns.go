package runtime

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// A worker's connections are one budget: Config.MaxConns for NewWorker,
// the pool's MaxConns for NewWorkerFromPool. It is divided so:
//
//   - one connection listens for notifications;
//   - one, at least, is left to maintenance, leadership and the other short
//     statements (recording a lost batch's outcomes, moving groups on,
//     handlers' progress reports);
//   - lease-mode queues claim, record and extend leases in short
//     statements too, and are left two each where the budget allows;
//   - the rest are the held-mode runners': a runner holds one while its
//     batches run, and the queues' runners take turns on them (see
//     connSlots).
//
// The pool is what bounds them all: NewWorker's own pool opens
// MaxConns-1 connections, the listener's being outside it; on the
// application's pool the listener holds one of the pool's.
const (
	// reservedConns are the listener's connection and maintenance's.
	reservedConns = 2
	// leaseConns is what a lease-mode queue is given where the budget
	// allows: one for claiming and recording, one for its heartbeat.
	leaseConns = 2
)

// connections is how many connections serving the queue takes at its
// Concurrency: one per runner in the held-transaction mode (a queue whose
// mode its kinds decide is counted so), and leaseConns in lease mode.
func (qc QueueConfig) connections() int {
	if qc.Mode == ModeLease {
		return leaseConns
	}
	return qc.withModeDefaults().Concurrency
}

// defaultMaxConns is the budget of a worker whose Config sets none: enough
// for its largest held-mode queue to run at its Concurrency, beside its
// lease-mode queues, its listener and its maintenance. One default queue
// gets the ten runners it always had; more queues share them.
func defaultMaxConns(queues map[string]QueueConfig) int {
	held, lease := 0, 0
	for _, qc := range queues {
		if qc.Mode == ModeLease {
			lease += qc.connections()
		} else {
			held = max(held, qc.connections())
		}
	}
	return reservedConns + lease + held
}

// minMaxConns is the smallest budget a worker can work on: the listener,
// maintenance and, with a held-mode queue (or one whose kinds may make it
// one), a runner's connection, which the held-mode queues then share.
func minMaxConns(queues map[string]QueueConfig) int {
	for _, qc := range queues {
		if qc.Mode != ModeLease {
			return reservedConns + 1
		}
	}
	return reservedConns
}

// checkMaxConns refuses a budget the worker cannot work on; where says
// where the budget came from.
func checkMaxConns(budget int, queues map[string]QueueConfig, where string) error {
	if need := minMaxConns(queues); budget < need {
		what := "one for notifications and one for maintenance"
		if need > reservedConns {
			what += ", and one for the held-mode queues' running batches, which they share"
		}
		return fmt.Errorf("%w: %s is %d, and the worker needs at least %d: %s",
			ErrNotEnoughConnections, where, budget, need, what)
	}
	return nil
}

// divideConnections gives the held-mode queues their share of the budget,
// once the queues' modes are settled: what the listener, maintenance and
// the lease-mode queues leave, at least one, at most their Concurrency
// together.
func (w *Worker) divideConnections() {
	held, lease := 0, 0
	for _, q := range w.queues {
		if q.cfg.Mode == ModeLease {
			lease++
		} else {
			held += q.cfg.Concurrency
		}
	}
	slots := 0
	if held > 0 {
		slots = min(held, max(1, w.maxConns-reservedConns-leaseConns*lease))
	}
	w.slots = newConnSlots(slots, slices.Sorted(maps.Keys(w.queues)))
}

// connSlots are the connections the held-mode runners of all queues take
// turns on. A runner takes a slot before it takes a connection from the
// pool and gives it back with the connection. While runners of another
// queue wait, a runner gives its slot up after each batch (see
// contended), and a slot given back goes to the queues that wait in turn,
// so no queue waits on another's backlog.
type connSlots struct {
	mu   sync.Mutex
	free int
	// queues are the names of the queues in turn order, and next the index
	// of the queue whose waiting runner a freed slot goes to first.
	queues  []string
	next    int
	waiting map[string][]chan struct{}
}

func newConnSlots(n int, queues []string) *connSlots {
	return &connSlots{free: n, queues: queues, waiting: map[string][]chan struct{}{}}
}

// acquire takes a slot for a runner of queue, waiting for one until ctx
// is done.
func (s *connSlots) acquire(ctx context.Context, queue string) error {
	s.mu.Lock()
	if s.free > 0 {
		s.free--
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	s.waiting[queue] = append(s.waiting[queue], ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	i := slices.Index(s.waiting[queue], ch)
	if i >= 0 {
		s.waiting[queue] = slices.Delete(s.waiting[queue], i, i+1)
	}
	s.mu.Unlock()
	if i < 0 {
		// The slot came as ctx ended: pass it on.
		s.release()
	}
	return ctx.Err()
}

// release gives a slot back: to a waiting runner of the next queue in
// turn that has one, else to the free ones.
func (s *connSlots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.queues {
		i := (s.next + k) % len(s.queues)
		name := s.queues[i]
		if w := s.waiting[name]; len(w) > 0 {
			s.waiting[name] = w[1:]
			s.next = i + 1
			close(w[0])
			return
		}
	}
	s.free++
}

// contended reports whether a runner of another queue than queue waits
// for a slot.
func (s *connSlots) contended(queue string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, w := range s.waiting {
		if name != queue && len(w) > 0 {
			return true
		}
	}
	return false
}

// discard closes a pooled connection, which ends its session and so
// releases its locks and rolls back whatever it had not committed.
func discard(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	conn.Conn().Close(ctx) //nolint:errcheck // the connection is being thrown away
	cancel()
	conn.Release()
}
