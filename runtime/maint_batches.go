package runtime

import (
	"context"

	"github.com/pgtask/pgtask/gen"
)

// batchFinisher ends the batches whose jobs have all finished and releases
// their callbacks (see pgtask.finish_batches), batch rows at a time, every
// maintenance round. It goes through the open batches in id order, going
// on each round from where the last stopped, so that many open batches
// take turns rather than the first ones being looked at again and again.
type batchFinisher struct {
	q     *gen.Queries
	batch int32
	// after is the id of the last batch the previous statement looked at.
	after int64
}

func (f *batchFinisher) step(ctx context.Context) error {
	for range 2 {
		r, err := f.q.FinishBatches(ctx, gen.FinishBatchesParams{After: f.after, Max: f.batch})
		if err != nil {
			return err
		}
		if r.Checked < f.batch {
			// The end of the open batches (some maybe skipped, locked by
			// another worker that looks at them now): start again from the
			// first next time, and this time if this one began midway.
			wrapped := f.after != 0
			f.after = 0
			if !wrapped {
				return nil
			}
			continue
		}
		f.after = r.Last
		return nil
	}
	return nil
}
