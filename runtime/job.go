package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Job is the job a handler is running.
type Job struct {
	ID          JobID
	Kind        string
	Queue       string
	Group       string // empty for an ungrouped job
	Priority    int16
	Attempt     int // this attempt, from 1
	MaxAttempts int
	// Snoozes is how often the job snoozed before this attempt (see
	// Snooze); a snooze spends no attempt, so Attempt does not count them.
	Snoozes int
	// MaxSnoozes is the task's cap on snoozes (Registration.MaxSnoozes):
	// a snooze when Snoozes has reached it fails the job for good.
	MaxSnoozes int
	Payload    json.RawMessage
	CreatedAt  time.Time
	// RunAfter is when the job was due to start: when it was enqueued, its
	// RunAt or Delay, or when its retry's backoff ended. The time from it
	// to the attempt's start is how long the job waited in its queue.
	RunAfter time.Time
	// Metadata is what the job was enqueued with (EnqueueOptions.Metadata);
	// nil for none.
	Metadata map[string]string

	tx     pgx.Tx
	result json.RawMessage
	lease  *jobLease // nil in the held-transaction mode
	// claimToken is the token of the held-mode claim that took the job, 0
	// for none: progress writes are fenced by it (see progressReporter).
	claimToken int64
	// cancelCause: the claim found the job's cancel pending, for this
	// cause (see pgtask.cancel_claimed and cancelCause), so the attempt
	// fails without its handler; "" for none.
	cancelCause string
	// progress writes ReportProgress's reports; nil for a Job no worker
	// runs.
	progress *progressReporter
}

// Tx is the job's transaction. What the handler writes through it commits
// together with the job's success and is rolled back if the handler fails,
// panics or times out. The worker commits it; calling Commit or Rollback on
// it returns an error.
//
// In the held-transaction mode it is the transaction that holds the job's
// lock, open for the whole attempt. In lease mode it begins on first use, on
// a connection of the worker's pool held until the attempt ends, and the
// success is recorded in it only if the attempt is still the job's current
// one: a taken-over attempt's writes are rolled back. A transaction that
// could not begin (the database is away) makes every method that returns
// an error return that error; Conn then returns nil and LargeObjects a zero
// value.
func (j *Job) Tx() pgx.Tx { return j.tx }

// SetResult stores v, as JSON, as the job's result when the handler
// succeeds. It refuses a value jsonb cannot store (a string holding a NUL
// character, a number too large for numeric), one nested more than
// MaxJSONDepth deep and one whose JSON is longer than MaxResultBytes.
func (j *Job) SetResult(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("job %d: encode result: %w", j.ID, err)
	}
	if err := jsonbRefusal(b); err != nil {
		return fmt.Errorf("job %d: result %w", j.ID, err)
	}
	if len(b) > MaxResultBytes {
		return fmt.Errorf("job %d: result is %d bytes of JSON, more than the %d allowed: store large data in a table of its own", j.ID, len(b), MaxResultBytes)
	}
	j.result = b
	return nil
}

// DecodePayload decodes the job's payload into a T. A payload that does not
// decode will not decode on a later attempt either, so the error is NoRetry.
func DecodePayload[T any](job *Job) (T, error) {
	var v T
	if err := json.Unmarshal(job.Payload, &v); err != nil {
		return v, NoRetry(fmt.Errorf("decode payload of job %d (kind %s): %w", job.ID, job.Kind, err))
	}
	return v, nil
}

var errTxOwnedByWorker = errors.New("pgtask: the job's transaction is committed or rolled back by the worker, not the handler")

// jobTx is the job's transaction as handed to the handler: everything but
// ending it. The savepoint that lets a failed job roll back alone is taken
// on first use, so a handler that never touches the transaction costs no
// round trip.
type jobTx struct {
	pgx.Tx
	savepoint func(context.Context) error
	taken     bool
}

func (t *jobTx) ensure(ctx context.Context) error {
	if t.taken {
		return nil
	}
	if err := t.savepoint(ctx); err != nil {
		return fmt.Errorf("pgtask: job savepoint: %w", err)
	}
	t.taken = true
	return nil
}

func (t *jobTx) Commit(context.Context) error   { return errTxOwnedByWorker }
func (t *jobTx) Rollback(context.Context) error { return errTxOwnedByWorker }

func (t *jobTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.ensure(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Begin(ctx)
}

func (t *jobTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.ensure(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.Tx.Exec(ctx, sql, args...)
}

func (t *jobTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.ensure(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Query(ctx, sql, args...)
}

func (t *jobTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.ensure(ctx); err != nil {
		return errRow{err}
	}
	return t.Tx.QueryRow(ctx, sql, args...)
}

func (t *jobTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.ensure(ctx); err != nil {
		return 0, err
	}
	return t.Tx.CopyFrom(ctx, table, columns, src)
}

func (t *jobTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.ensure(ctx); err != nil {
		return nil, err
	}
	return t.Tx.Prepare(ctx, name, sql)
}

// SendBatch, LargeObjects and Conn cannot report a failed savepoint; a
// connection that could not take one is broken, and the worker then rolls
// the whole transaction back.
func (t *jobTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	t.ensure(ctx) //nolint:errcheck // see above
	return t.Tx.SendBatch(ctx, b)
}

func (t *jobTx) LargeObjects() pgx.LargeObjects {
	t.ensure(context.Background()) //nolint:errcheck // see above
	return t.Tx.LargeObjects()
}

func (t *jobTx) Conn() *pgx.Conn {
	t.ensure(context.Background()) //nolint:errcheck // see above
	return t.Tx.Conn()
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
