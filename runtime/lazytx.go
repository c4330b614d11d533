package runtime

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/gen"
)

// lazyTx is a lease-mode job's transaction: it takes a connection from the
// pool and begins on first use, so a handler that never writes holds no
// connection. The worker ends it: a success is recorded in it and commits
// with the handler's writes. Commit and Rollback called by the handler
// return an error.
type lazyTx struct {
	w *Worker

	mu   sync.Mutex
	conn *pgxpool.Conn
	tx   pgx.Tx
	err  error
}

func (t *lazyTx) begun() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tx != nil
}

// get begins the transaction on first use.
func (t *lazyTx) get(ctx context.Context) (pgx.Tx, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tx != nil || t.err != nil {
		return t.tx, t.err
	}
	conn, err := t.w.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgtask: job transaction: acquire connection: %w", err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err == nil {
		err = gen.New(tx).SetTransactionIdleTimeout(ctx, strconv.FormatInt(t.w.idleTimeout.Milliseconds(), 10))
		if err != nil {
			tx.Rollback(ctx) //nolint:errcheck // the error below is what matters
		}
	}
	if err != nil {
		conn.Release()
		return nil, fmt.Errorf("pgtask: job transaction: begin: %w", err)
	}
	t.conn, t.tx = conn, tx
	return tx, nil
}

// settle records a success in the transaction and commits it if the
// success was recorded; otherwise (a stale attempt) it rolls back.
func (t *lazyTx) settle(ctx context.Context, queue string, outs []outcome) (bool, error) {
	t.mu.Lock()
	tx := t.tx
	t.mu.Unlock()
	res, err := settleNow(ctx, tx, queue, outs)
	if err != nil {
		t.end(ctx, false) //nolint:errcheck // the settle error is what matters
		return false, err
	}
	recorded := int(res.Recorded) == len(outs)
	if err := t.end(ctx, recorded); err != nil {
		return false, err
	}
	if recorded {
		t.w.recorded(ctx, queue, outs, res)
	}
	return recorded, nil
}

// end commits or rolls back, and gives the connection back.
func (t *lazyTx) end(ctx context.Context, commit bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tx == nil {
		return nil
	}
	var err error
	if commit {
		err = t.tx.Commit(ctx)
	} else {
		err = t.tx.Rollback(ctx)
	}
	if err != nil {
		// The session's state is unknown: close it rather than pool it.
		t.conn.Conn().Close(ctx) //nolint:errcheck // being thrown away
	}
	t.conn.Release()
	t.tx, t.conn = nil, nil
	t.err = errTxOwnedByWorker
	return err
}

func (t *lazyTx) Commit(context.Context) error   { return errTxOwnedByWorker }
func (t *lazyTx) Rollback(context.Context) error { return errTxOwnedByWorker }

func (t *lazyTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.get(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Begin(ctx)
}

func (t *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tx, err := t.get(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return tx.Exec(ctx, sql, args...)
}

func (t *lazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	tx, err := t.get(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Query(ctx, sql, args...)
}

func (t *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	tx, err := t.get(ctx)
	if err != nil {
		return errRow{err}
	}
	return tx.QueryRow(ctx, sql, args...)
}

func (t *lazyTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	tx, err := t.get(ctx)
	if err != nil {
		return 0, err
	}
	return tx.CopyFrom(ctx, table, columns, src)
}

func (t *lazyTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	tx, err := t.get(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Prepare(ctx, name, sql)
}

func (t *lazyTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	tx, err := t.get(ctx)
	if err != nil {
		return errBatch{err}
	}
	return tx.SendBatch(ctx, b)
}

// LargeObjects and Conn cannot report a transaction that could not begin:
// they then return a zero value and nil.
func (t *lazyTx) LargeObjects() pgx.LargeObjects {
	tx, err := t.get(context.Background())
	if err != nil {
		return pgx.LargeObjects{}
	}
	return tx.LargeObjects()
}

func (t *lazyTx) Conn() *pgx.Conn {
	tx, err := t.get(context.Background())
	if err != nil {
		return nil
	}
	return tx.Conn()
}

type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow{b.err} }
func (b errBatch) Close() error                     { return b.err }
func (b errBatch) Tx() pgx.Tx                       { return nil }
