package runtime

import (
	"context"
	"log/slog"
	"slices"

	"github.com/pgtask/pgtask/gen"
)

// dueMover changes the due jobs of one kind of maintenance, batch rows at
// a time, every maintenance round: the promoter moves due scheduled jobs
// (delayed jobs and retries waiting out their backoff) to their queues,
// the ager raises the priority of queued jobs that waited long enough for
// their next level (see EnqueueOptions.Aging).
//
// A job whose row breaks a check the table was given after the row was
// stored (NOT VALID) cannot be written, so it stays; the others move on,
// and the mover says which jobs those are (unwritable), once until they
// change: an operator has to delete them.
type dueMover struct {
	log   *slog.Logger
	batch int32
	// move changes up to max due jobs; it returns how many it changed and
	// the due ones it could not.
	move       func(ctx context.Context, max int32) (moved int32, skipped []int64, err error)
	unwritable string
	// unmovable are the due jobs the last step found it cannot change.
	unmovable []int64
}

func newPromoter(q *gen.Queries, log *slog.Logger, batch int32) *dueMover {
	return &dueMover{log: log, batch: batch,
		move: func(ctx context.Context, max int32) (int32, []int64, error) {
			r, err := q.PromoteScheduled(ctx, max)
			return r.Moved, r.Skipped, err
		},
		unwritable: "pgtask: due jobs cannot be queued: their rows break a check constraint added after they were stored (NOT VALID), so no change to them can be written; delete them",
	}
}

func newAger(q *gen.Queries, log *slog.Logger, batch int32) *dueMover {
	return &dueMover{log: log, batch: batch,
		move: func(ctx context.Context, max int32) (int32, []int64, error) {
			r, err := q.AgePriorities(ctx, max)
			return r.Aged, r.Skipped, err
		},
		unwritable: "pgtask: queued jobs cannot have their priority raised: their rows break a check constraint added after they were stored (NOT VALID), so no change to them can be written; delete them",
	}
}

func (p *dueMover) step(ctx context.Context) error {
	var unmovable []int64
	for {
		moved, skipped, err := p.move(ctx, p.batch)
		if err != nil {
			return err
		}
		for _, id := range skipped {
			if !slices.Contains(unmovable, id) {
				unmovable = append(unmovable, id)
			}
		}
		if moved == 0 || int(moved)+len(skipped) < int(p.batch) {
			break
		}
	}
	slices.Sort(unmovable)
	if len(unmovable) > 0 && !slices.Equal(unmovable, p.unmovable) {
		p.log.Error(p.unwritable, "jobs", unmovable)
	}
	p.unmovable = unmovable
	return nil
}
