package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
	Payload     json.RawMessage
	CreatedAt   time.Time

	tx     pgx.Tx
	result json.RawMessage
}

// Tx is the transaction that holds the job's lock. What the handler writes
// through it commits together with the job's success and is rolled back if
// the handler fails, panics or times out. The worker commits it; calling
// Commit or Rollback on it returns an error.
func (j *Job) Tx() pgx.Tx { return j.tx }

// SetResult stores v, as JSON, as the job's result when the handler succeeds.
func (j *Job) SetResult(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("job %d: encode result: %w", j.ID, err)
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

// jobTx is the job's savepoint as handed to the handler: everything but ending it.
type jobTx struct{ pgx.Tx }

func (t jobTx) Commit(context.Context) error   { return errTxOwnedByWorker }
func (t jobTx) Rollback(context.Context) error { return errTxOwnedByWorker }
