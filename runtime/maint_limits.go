package runtime

import (
	"context"

	"github.com/pgtask/pgtask/gen"
)

// limitChecker applies, each maintenance round, the keys' pending checks
// (see pgtask.check_limits): slots an enqueue or a finisher could not take
// from or give back to a key's row without waiting, and waiting jobs to
// admit into free slots.
type limitChecker struct {
	q     *gen.Queries
	batch int32
}

func (c *limitChecker) step(ctx context.Context) error {
	_, err := c.q.CheckLimits(ctx, c.batch)
	return err
}
