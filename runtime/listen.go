package runtime

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/gen"
)

// cancelChannel carries the ids of running jobs an operator cancelled.
const cancelChannel = "pgtask_cancel"

// listen keeps one connection LISTENing on the pgtask channel and wakes the
// queue each notification names, and on the cancel channel, cancelling the
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
	if err := q.ListenCancel(ctx); err != nil {
		return false, err
	}
	w.wakeAll()
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		if n.Channel == cancelChannel {
			w.cancelNotified(ctx, n.Payload)
			continue
		}
		if q := w.queues[n.Payload]; q != nil {
			q.signal()
		}
	}
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
