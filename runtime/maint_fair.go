package runtime

import (
	"context"

	"github.com/pgtask/pgtask/gen"
)

// fairClock moves each fair queue's clock on to the turn its claims are at
// (see pgtask.advance_fair_clocks), so that a tenant whose jobs come after
// the queue ran dry starts at the queue's turn, not at the beginning.
type fairClock struct {
	q *gen.Queries
}

func (c *fairClock) step(ctx context.Context) error {
	_, err := c.q.AdvanceFairClocks(ctx)
	return err
}
