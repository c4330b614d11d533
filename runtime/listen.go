package runtime

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/gen"
)

// listen keeps one connection LISTENing on the pgtask channel and wakes the
// queue each notification names. Whenever the connection is (re)made every
// queue is woken, since notifications sent while it was down are lost; the
// runners' polling covers the rest.
func (w *Worker) listen(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := w.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("pgtask: notification listener lost its connection; reconnecting", "error", err, "retry_in", backoff)
		sleep(ctx, backoff)
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (w *Worker) listenOnce(ctx context.Context) error {
	pc, err := pgx.ConnectConfig(ctx, w.listenConfig)
	if err != nil {
		return err
	}
	defer pc.Close(context.WithoutCancel(ctx)) //nolint:errcheck // discarded either way

	q := gen.New(pc)
	if err := q.LockWorker(ctx, w.id); err != nil {
		return err
	}
	if err := q.Listen(ctx); err != nil {
		return err
	}
	w.wakeAll()
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if q := w.queues[n.Payload]; q != nil {
			q.signal()
		}
	}
}
