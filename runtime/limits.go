package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgtask/pgtask/gen"
)

// LimitInfo is the state of one limit key (see EnqueueOptions.Limit): its
// limit, and its jobs now.
type LimitInfo struct {
	Queue string
	Key   string // "" for the queue's own limit
	// Declared is the limit the tasks declare (the latest enqueue's);
	// Limit the one in force, an operator's (Overridden) or Declared.
	Declared   int
	Limit      int
	Overridden bool
	// Free is how many more jobs of the key may be admitted now; below 0
	// after a limit was lowered under the jobs already admitted.
	Free    int
	Running int64 // started now
	Waiting int64 // queued, waiting for a slot
}

// SetLimit sets an operator's limit for key of queue ("" for the queue's
// own limit), which wins over the limit the tasks declare, at once and for
// every worker, until it is cleared: n 0 clears it. A raised limit admits
// waiting jobs at once (the queue's workers are woken and claim them); a
// lowered one admits none until enough of the running ones have ended (none
// is stopped). It reports how many live keys it changed.
func SetLimit(ctx context.Context, db DB, queue, key string, n int) (int, error) {
	return setLimit(ctx, db, queue, &key, n)
}

// SetEveryKeyLimit is SetLimit for every key of queue but the queue's own,
// now and later, except those with a limit of their own from SetLimit.
func SetEveryKeyLimit(ctx context.Context, db DB, queue string, n int) (int, error) {
	return setLimit(ctx, db, queue, nil, n)
}

func setLimit(ctx context.Context, db DB, queue string, key *string, n int) (int, error) {
	what := "every key"
	if key != nil {
		what = fmt.Sprintf("key %q", *key)
	}
	if err := checkName("queue", queue, MaxQueueBytes); err != nil || queue == "" {
		return 0, fmt.Errorf("set limit: %w", cmp.Or(err, errors.New("queue name is empty")))
	}
	if key != nil {
		if err := checkName("limit key", *key, MaxGroupKeyBytes); err != nil {
			return 0, fmt.Errorf("set limit: %w", err)
		}
	}
	if n < 0 || n > math.MaxInt32 {
		return 0, fmt.Errorf("set limit of %s in queue %s: %d is out of range [1, %d] (0 clears it)", what, queue, n, math.MaxInt32)
	}
	max := pgtype.Int4{Int32: int32(n), Valid: n > 0}
	changed, err := gen.New(db).SetLimit(ctx, gen.SetLimitParams{Queue: queue, LimitKey: key, MaxRunning: max})
	if err != nil {
		return 0, fmt.Errorf("set limit of %s in queue %s: %w", what, queue, err)
	}
	return int(changed), nil
}

// Limits lists the limit keys of queue (every queue for ""), at most max of
// them (0: 1000), by queue and key.
func Limits(ctx context.Context, db DB, queue string, max int) ([]LimitInfo, error) {
	if max <= 0 {
		max = 1000
	}
	rows, err := gen.New(db).ListLimits(ctx, gen.ListLimitsParams{Queue: queue, MaxRows: int32(min(max, math.MaxInt32))})
	if err != nil {
		return nil, fmt.Errorf("list limits: %w", err)
	}
	out := make([]LimitInfo, len(rows))
	for i, r := range rows {
		out[i] = LimitInfo{Queue: r.Queue, Key: r.LimitKey, Declared: int(r.Declared), Limit: int(r.MaxRunning),
			Overridden: r.Overridden, Free: int(r.Free), Running: r.Running, Waiting: r.Waiting}
	}
	return out, nil
}

// LimitOverride is an operator's limit (see SetLimit), which wins over the
// limit the tasks declare.
type LimitOverride struct {
	Queue string
	// Key is the limit key it is for ("" for the queue's own limit), unless
	// EveryKey: then it is for every key of the queue but the queue's own,
	// except those with an override of their own.
	Key      string
	EveryKey bool
	Limit    int
	SetAt    time.Time
}

// LimitOverrides lists the operators' limits of queue (every queue for
// ""), by queue and key, each queue's every-key limit first.
func LimitOverrides(ctx context.Context, db DB, queue string) ([]LimitOverride, error) {
	rows, err := gen.New(db).ListLimitOverrides(ctx)
	if err != nil {
		return nil, fmt.Errorf("list limit overrides: %w", err)
	}
	out := []LimitOverride{}
	for _, r := range rows {
		if queue != "" && r.Queue != queue {
			continue
		}
		o := LimitOverride{Queue: r.Queue, EveryKey: r.LimitKey == nil, Limit: int(r.MaxRunning), SetAt: r.SetAt}
		if r.LimitKey != nil {
			o.Key = *r.LimitKey
		}
		out = append(out, o)
	}
	return out, nil
}

// JobLimit is the concurrency limit a job counts against, and where the
// job stands with it.
type JobLimit struct {
	Queue string
	Key   string // "" for the queue's own limit
	Limit int    // in force now
	// Admitted: the job holds one of its key's slots, queued to run or
	// running. Waiting: it is queued and waits for a free slot. Neither:
	// it holds no slot now (scheduled, or finished).
	Admitted bool
	Waiting  bool
}

// GetJobLimit reads the concurrency limit of job id (see
// EnqueueOptions.Limit): nil for a job without one, or no such job.
func GetJobLimit(ctx context.Context, db DB, id JobID) (*JobLimit, error) {
	r, err := gen.New(db).GetJobLimit(ctx, int64(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get the limit of job %d: %w", id, err)
	}
	return &JobLimit{Queue: r.Queue, Key: r.LimitKey, Limit: int(r.MaxRunning), Admitted: r.Admitted, Waiting: r.Waiting}, nil
}
