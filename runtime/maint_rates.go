package runtime

import (
	"context"

	"github.com/pgtask/pgtask/gen"
)

// rateChecker, each maintenance round, marks ready the rate keys that jobs
// came to wait on while someone else held their rows (see
// pgtask.check_rates), and learns which of the worker's queues have rate
// keys: their runners read when the next token is due with each claim.
type rateChecker struct {
	q      *gen.Queries
	batch  int32
	queues map[string]*queue
	names  []string
}

func (c *rateChecker) step(ctx context.Context) error {
	if _, err := c.q.CheckRates(ctx, c.batch); err != nil {
		return err
	}
	rated, err := c.q.RatedQueues(ctx, c.names)
	if err != nil {
		return err
	}
	for name, q := range c.queues {
		has := false
		for _, r := range rated {
			has = has || r == name
		}
		if q.rates.Load().rated != has {
			q.updateRates(func(c *rateClock) { c.rated = has })
			if has {
				q.signal() // it learns when its next token is due
			}
		}
	}
	return nil
}
