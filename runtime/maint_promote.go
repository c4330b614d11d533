package runtime

import (
	"context"
	"log/slog"
	"slices"

	"github.com/pgtask/pgtask/gen"
)

// promoter moves the due scheduled jobs (delayed jobs and retries waiting
// out their backoff) to their queues, batch rows at a time, every
// maintenance round.
//
// A job whose row breaks a check the table was given after the row was
// stored (NOT VALID) cannot be written, so it stays; the others move on,
// and the promoter says which jobs those are, once until they change: an
// operator has to delete them.
type promoter struct {
	q     *gen.Queries
	log   *slog.Logger
	batch int32
	// unmovable are the due jobs the last step found it cannot promote.
	unmovable []int64
}

func (p *promoter) step(ctx context.Context) error {
	var unmovable []int64
	for {
		r, err := p.q.PromoteScheduled(ctx, p.batch)
		if err != nil {
			return err
		}
		for _, id := range r.Skipped {
			if !slices.Contains(unmovable, id) {
				unmovable = append(unmovable, id)
			}
		}
		if r.Moved == 0 || int(r.Moved)+len(r.Skipped) < int(p.batch) {
			break
		}
	}
	slices.Sort(unmovable)
	if len(unmovable) > 0 && !slices.Equal(unmovable, p.unmovable) {
		p.log.Error("pgtask: due jobs cannot be queued: their rows break a check constraint added after they were stored (NOT VALID), so no change to them can be written; delete them", "jobs", unmovable)
	}
	p.unmovable = unmovable
	return nil
}
