package runtime

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgtask/pgtask/gen"
)

// cancelChannel carries the ids of running jobs an operator cancelled.
const cancelChannel = "pgtask_cancel"

// workflowChannel names workflow steps whose parents' outcomes wait in
// notes (see workflowKeeper).
const workflowChannel = "pgtask_workflow"

// behindChannel names queues with jobs made runnable behind the claims'
// cursors (see pgtask.pick_heads); the pgtask channel, queues with new
// jobs.
const behindChannel = "pgtask_behind"

// listen keeps one connection LISTENing on the pgtask channel and wakes the
// queue each notification names, holding the idle lock of each queue with
// an idle runner so that its enqueues notify (see announceIdle), and on the cancel channel, cancelling the
// running job each of its notifications names (maintenance catches the
// ones lost while it reconnects). Whenever the connection is (re)made every
// queue is woken, since notifications sent while it was down are lost; the
// runners' polling covers the rest.
func (w *Worker) listen(ctx context.Context) {
	var delay retryDelay
	for ctx.Err() == nil {
		listened, err := w.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if listened {
			// The connection worked until now: a new failure starts the
			// backoff over, rather than waiting as long as the last outage.
			delay.reset()
		}
		wait := delay.next()
		w.log.Warn("pgtask: notification listener lost its connection; reconnecting", "error", err, "retry_in", wait)
		sleep(ctx, wait)
	}
}

// listenOnce connects and listens until the connection fails. It reports
// whether it got as far as listening.
func (w *Worker) listenOnce(ctx context.Context) (listened bool, err error) {
	pc, done, err := w.listenConn(ctx)
	if err != nil {
		return false, err
	}
	defer done()

	q := gen.New(pc)
	if err := q.LockWorker(ctx, w.id); err != nil {
		return false, err
	}
	if err := q.Listen(ctx); err != nil {
		return false, err
	}
	if err := q.ListenBehind(ctx); err != nil {
		return false, err
	}
	if err := q.ListenCancel(ctx); err != nil {
		return false, err
	}
	if err := q.ListenWorkflow(ctx); err != nil {
		return false, err
	}
	w.wakeAll()
	locks := map[string]*idleLock{}
	for {
		again, err := w.announceIdle(ctx, q, locks)
		if err != nil {
			return true, err
		}
		n, err := w.waitForNotification(ctx, pc, again)
		if err != nil {
			return true, err
		}
		if n == nil {
			continue // an idle runner came or went, or it is time again
		}
		if n.Channel == cancelChannel {
			w.cancelNotified(ctx, n.Payload)
			continue
		}
		if n.Channel == workflowChannel {
			if w.maint != nil {
				w.maint.flows.notified(n.Payload)
			}
			continue
		}
		first, name := parseWake(n.Payload)
		if q := w.queues[name]; q != nil {
			if n.Channel == behindChannel && first == 0 {
				q.cursor.lookBehind()
			} else {
				q.cursor.heard(first)
			}
			q.signal()
		}
	}
}

// parseWake reads a wake-up: the first head's id, a colon, and the queue
// (see pgtask.pick_heads); first is 0 when the payload names the queue
// alone.
func parseWake(payload string) (first int64, queue string) {
	id, rest, ok := strings.Cut(payload, ":")
	if !ok {
		return 0, payload
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return 0, payload
	}
	return n, rest
}

// listenConn opens the listener's connection, or on the application's pool
// (NewWorkerFromPool) takes one of the pool's, which counts against its
// MaxConns like the worker's others. done closes it either way: a session
// that listens and holds the worker lock must not go back to the pool.
func (w *Worker) listenConn(ctx context.Context) (pc *pgx.Conn, done func(), err error) {
	if w.listenConfig != nil {
		pc, err := pgx.ConnectConfig(ctx, w.listenConfig)
		if err != nil {
			return nil, nil, err
		}
		return pc, func() { pc.Close(context.WithoutCancel(ctx)) }, nil //nolint:errcheck // discarded either way
	}
	conn, err := w.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	return conn.Conn(), func() { discard(conn) }, nil
}

// idleLinger is how long the listener keeps a queue's idle lock after the
// queue's last idle runner got busy. Runners that drain a backlog are idle
// between claims for moments only; taking the lock again costs a look at
// pg_locks and a claim, so it is let go only once they stay busy.
const idleLinger = 50 * time.Millisecond

// inFlightPoll bounds the wait between looks at the enqueues the listener
// waits for (see announceIdle): it starts at a millisecond and doubles up to
// this, for an enqueue in a transaction that stays open long.
const inFlightPoll = 50 * time.Millisecond

// inFlightPollLong is the wait between looks at enqueues in flight that
// have lasted a second already: only their own jobs wait for these looks,
// and each look reads pg_locks.
const inFlightPollLong = time.Second

// idleLock is what the listener's session holds of a queue's idle lock.
type idleLock struct {
	held bool
	// busySince is when the queue last lost its last idle runner while the
	// lock was held; zero while it has one.
	busySince time.Time
	// inFlight are the enqueues (virtual transaction ids) that held the
	// queue's enqueue lock when the idle lock was taken: they may have found
	// it free and not notified. Once they are all gone, a runner claims.
	inFlight []string
	poll     time.Duration
	next     time.Time
	since    time.Time // when the lock was taken with enqueues in flight
	// retry is the wait before trying again to take the lock.
	retry time.Duration
}

// announceIdle holds the idle lock of every queue with a runner waiting for
// a wake-up, and lets it go once none has waited for idleLinger; locks says
// what the session holds. An enqueue notifies only while the lock of its
// queue is held, and an enqueue that did not may commit after the claim
// that made a runner idle: so on taking the lock, the listener wakes a
// runner to claim again, lists the enqueues still in flight, and wakes a
// runner again whenever some of them are done. One that stays open long
// holds back no one else's jobs. Enqueues that begin after the lock was
// taken find it and notify. It returns how soon it must
// run again, 0 for when an idle runner comes or goes.
func (w *Worker) announceIdle(ctx context.Context, q *gen.Queries, locks map[string]*idleLock) (time.Duration, error) {
	now := time.Now()
	var again time.Duration
	soon := func(d time.Duration) {
		if again == 0 || d < again {
			again = max(d, time.Microsecond)
		}
	}
	for name, wq := range w.queues {
		l := locks[name]
		if l == nil {
			l = &idleLock{}
			locks[name] = l
		}
		idle := wq.idle.Load() > 0
		switch {
		case idle && !l.held:
			ok, err := q.AnnounceIdle(ctx, name)
			if err != nil {
				return 0, fmt.Errorf("announce idle runners: %w", err)
			}
			if !ok {
				// An enqueue was testing the lock, which takes an instant
				// (another role's session holding it exclusively would
				// take longer: enqueues notify meanwhile).
				l.retry = min(max(2*l.retry, 100*time.Microsecond), inFlightPoll)
				soon(l.retry)
				continue
			}
			l.held, l.busySince, l.retry = true, time.Time{}, 0
			if l.inFlight, err = q.EnqueuesInFlight(ctx, gen.EnqueuesInFlightParams{Queue: name}); err != nil {
				return 0, fmt.Errorf("list enqueues in flight: %w", err)
			}
			// A runner claims at once, for what committed before the lock
			// was taken; an enqueue still in flight may have found the lock
			// free and not notify: each one's end wakes a runner again.
			// Their jobs may lie behind the claims' cursor.
			wq.cursor.lookBehind()
			wq.signal()
			if len(l.inFlight) == 0 {
				continue
			}
			l.poll, l.next, l.since = time.Millisecond, now.Add(time.Millisecond), now
		case idle:
			l.busySince = time.Time{}
		case l.held:
			if l.busySince.IsZero() {
				l.busySince = now
			}
			if left := idleLinger - now.Sub(l.busySince); left > 0 {
				soon(left)
			} else {
				if err := q.WithdrawIdle(ctx, name); err != nil {
					return 0, fmt.Errorf("withdraw idle runners: %w", err)
				}
				*l = idleLock{}
				continue
			}
		}
		if !l.held || len(l.inFlight) == 0 {
			continue
		}
		if now.Before(l.next) {
			soon(l.next.Sub(now))
			continue
		}
		still, err := q.EnqueuesInFlight(ctx, gen.EnqueuesInFlightParams{Queue: name, Among: l.inFlight})
		if err != nil {
			return 0, fmt.Errorf("list enqueues in flight: %w", err)
		}
		if len(still) < len(l.inFlight) {
			wq.cursor.lookBehind()
			wq.signal()
		}
		if l.inFlight = still; len(still) == 0 {
			continue
		}
		// An enqueue whose transaction stays open long (a batch import, a
		// session idle in transaction) is looked for less often once it
		// has lasted a second: each look reads pg_locks.
		l.poll = min(2*l.poll, inFlightPoll)
		if now.Sub(l.since) > time.Second {
			l.poll = inFlightPollLong
		}
		l.next = now.Add(l.poll)
		soon(l.poll)
	}
	return again, nil
}

// waitForNotification waits for a notification on pc. It returns nil and
// no error when a queue gets its first idle runner or loses its last, or
// after timeout (unless 0), for the listener to see to the idle locks. The
// wait is cut short through the connection's read deadline, which leaves
// it usable (pgconn closes a connection on any read error but a timeout),
// whatever the connection does when a context is cancelled.
func (w *Worker) waitForNotification(ctx context.Context, pc *pgx.Conn, timeout time.Duration) (*pgconn.Notification, error) {
	nc := pc.PgConn().Conn()
	var cut atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var expired <-chan time.Time
		if timeout > 0 {
			t := time.NewTimer(timeout)
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-w.idleChanged:
		case <-expired:
		case <-stop:
			return
		}
		cut.Store(true)
		nc.SetReadDeadline(time.Now()) //nolint:errcheck // a failure shows as the wait's
	})
	n, err := pc.WaitForNotification(ctx)
	close(stop)
	wg.Wait()
	if !cut.Load() {
		return n, err
	}
	if derr := nc.SetReadDeadline(time.Time{}); derr != nil && err == nil {
		return nil, derr
	}
	if err != nil && ctx.Err() == nil && pgconn.Timeout(err) {
		return nil, nil
	}
	return n, err
}
