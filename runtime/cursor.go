package runtime

import (
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgtask/pgtask/gen"
)

// Where a queue's claims start, and how often they start from the
// beginning instead; variables so tests can shorten them.
var (
	// claimCursorLag is how far behind the last head claimed a claim starts,
	// in time: a job whose enqueue took its id before a later job's and
	// committed after that one was claimed (two enqueuing transactions
	// commit in any order) is usually found by the next claims still.
	claimCursorLag = 250 * time.Millisecond
	// claimRewindEvery is how often a queue's next claim scans from the
	// beginning, for the heads that became runnable behind the cursor: as
	// often as an idle worker polls by default (Config.PollInterval).
	claimRewindEvery = time.Second
)

// claimCursor is where a queue's claims start (see pgtask.pick_heads), in
// the claim index's (priority, id) order. The index's entries before the
// last head claimed belong to claimed jobs, dead, and while any session of
// the server holds a snapshot from before their claim nothing can remove
// them or even mark them dead: a claim that scanned from the beginning, or
// looked back over them whenever the queue ran dry, cost more with every job
// run. So claims start at the last head claimed; after a claim that found
// nothing, at where the cursor was claimCursorLag before, which finds late
// commits for the price of the few entries claimed since; and once every
// claimRewindEvery, at the beginning, for the heads that became runnable
// further back (retries, a group's next job, jobs handed back or rescued),
// waking a runner for it if the queue ran dry meanwhile. That one claim a
// second steps over the dead entries, not every claim.
type claimCursor struct {
	mu sync.Mutex
	// last is where claims have got to; mark is last as it was at markAt,
	// and lagged mark as it was at least a lag before now.
	last, mark, lagged cursorPos
	markAt             time.Time
	rewoundAt          time.Time
	// dry is set when the last claim found nothing; rewound when the last
	// claim asked for started from the beginning; owed while a wake-up for
	// a claim from the beginning is due (see moveTo).
	dry, rewound, owed bool
}

// cursorPos is a head's place in the claim index; the zero value is the
// beginning.
type cursorPos struct {
	set      bool
	priority int16
	id       int64
}

// get returns where the next claim starts: NULLs for the beginning.
func (c *claimCursor) get() (pgtype.Int2, pgtype.Int8) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.markAt) >= claimCursorLag {
		c.lagged, c.mark, c.markAt = c.mark, c.last, now
	}
	at := c.last
	c.rewound = now.Sub(c.rewoundAt) >= claimRewindEvery
	switch {
	case c.rewound:
		c.rewoundAt = now
		at = cursorPos{}
	case c.dry:
		at = c.lagged
	}
	return pgtype.Int2{Int16: at.priority, Valid: at.set}, pgtype.Int8{Int64: at.id, Valid: at.set}
}

// moveTo records the last of a claim's rows, which come in priority, id
// order. A claim that started behind the cursor and found heads there moves
// it back, so the claims after it take the rest of those in order, for the
// price of going over the dead entries from there once more.
//
// A claim that found nothing and did not start from the beginning may have
// left heads behind the cursor, and its runner may now wait for a
// notification or a poll (Config.PollInterval, which can be long) before
// claiming again: so wake calls for a claim when the next rewind is due.
func (c *claimCursor) moveTo(rows []gen.ClaimJobsRow, wake func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dry = len(rows) == 0
	if c.dry {
		if !c.rewound && !c.owed {
			c.owed = true
			time.AfterFunc(time.Until(c.rewoundAt.Add(claimRewindEvery)), func() {
				c.mu.Lock()
				c.owed = false
				c.mu.Unlock()
				wake()
			})
		}
		return
	}
	last := rows[len(rows)-1]
	c.last = cursorPos{set: true, priority: last.Priority, id: last.ID}
}

// rewind has the next claim start from the beginning: for Drain and
// WorkOne, which stop at the first claim that finds nothing.
func (c *claimCursor) rewind() {
	c.mu.Lock()
	c.rewoundAt = time.Time{}
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
		q.cursor.moveTo(*next, q.signal)
		return nil
	}
}
