package runtime

import (
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgtask/pgtask/gen"
)

// claimCursor is where a queue's claims start: the (priority, id) of the
// last head claimed. The claim index's entries before it belong to claimed
// jobs, dead but kept while any session of the server holds a snapshot from
// before their claim; starting there saves stepping over them (see
// pgtask.pick_heads, which still looks before it when the rest runs short).
type claimCursor struct {
	mu       sync.Mutex
	set      bool
	priority int16
	id       int64
}

func (c *claimCursor) get() (pgtype.Int2, pgtype.Int8) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return pgtype.Int2{Int16: c.priority, Valid: c.set}, pgtype.Int8{Int64: c.id, Valid: c.set}
}

// moveTo records the last of a claim's rows, which come in priority, id
// order.
func (c *claimCursor) moveTo(rows []gen.ClaimJobsRow) {
	if len(rows) == 0 {
		return
	}
	last := rows[len(rows)-1]
	c.mu.Lock()
	c.set, c.priority, c.id = true, last.Priority, last.ID
	c.mu.Unlock()
}

// collectClaim reads a claim's rows into next and moves the cursor.
func (q *queue) collectClaim(next *[]gen.ClaimJobsRow) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		var err error
		*next, err = pgx.CollectRows(rows, pgx.RowToStructByName[gen.ClaimJobsRow])
		if err != nil {
			return fmt.Errorf("claim jobs: %w", err)
		}
		q.cursor.moveTo(*next)
		return nil
	}
}
