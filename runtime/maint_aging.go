package runtime

import (
	"context"
	"log/slog"
	"slices"

	"github.com/pgtask/pgtask/gen"
)

// ager raises the priority of queued jobs that waited long enough for their
// next level (see EnqueueOptions.Aging), batch rows at a time, every
// maintenance round. A job whose row cannot be written (it breaks a check
// added NOT VALID after it was stored) keeps its priority; the ager says
// which jobs those are, once until they change.
type ager struct {
	q     *gen.Queries
	log   *slog.Logger
	batch int32
	// unmovable are the due jobs the last step found it cannot change.
	unmovable []int64
}

func (a *ager) step(ctx context.Context) error {
	var unmovable []int64
	for {
		r, err := a.q.AgePriorities(ctx, a.batch)
		if err != nil {
			return err
		}
		for _, id := range r.Skipped {
			if !slices.Contains(unmovable, id) {
				unmovable = append(unmovable, id)
			}
		}
		if r.Aged == 0 || int(r.Aged)+len(r.Skipped) < int(a.batch) {
			break
		}
	}
	slices.Sort(unmovable)
	if len(unmovable) > 0 && !slices.Equal(unmovable, a.unmovable) {
		a.log.Error("pgtask: queued jobs cannot have their priority raised: their rows break a check constraint added after they were stored (NOT VALID), so no change to them can be written; delete them", "jobs", unmovable)
	}
	a.unmovable = unmovable
	return nil
}
