package runtime

import (
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgtask/pgtask/gen"
)

// lookBackEvery bounds how long a head can lie behind a queue's claim
// cursor unseen when nothing tells the worker of it. Heads made runnable
// behind it are announced: an enqueue that commits after a later job's
// claim by its notification, and promotions, retries, hand-backs and
// resumed queues on the pgtask_behind channel, each carrying the first
// such head's id (the floor moves back to it) or naming only the queue (a
// look back from the start); an enqueue that did not notify, since every
// runner was busy, by the listener's look at the enqueues in flight as a
// runner goes idle. Once this long after the last look back from the
// start, a claim that comes up short looks back from the start again, for
// anything else.
const lookBackEvery = 5 * time.Second

// claimCursor is where a queue's claims start: the (priority, id) of the
// last head the claims' scans found. The claim index's entries before it
// belong to claimed jobs, dead but kept while any session of the server
// holds a snapshot from before their claim; starting there saves stepping
// over them. A claim that comes up short looks behind the cursor, from the
// floor (see pgtask.pick_heads).
type claimCursor struct {
	mu       sync.Mutex
	set      bool
	priority int16
	id       int64
	// floor is the cursor of the last claim that came up short: it looked
	// behind its cursor as far as its floor, so nothing was behind it then
	// but heads announced since (heard) or found within lookBackEvery.
	floorSet      bool
	floorPriority int16
	floorID       int64
	lastFull      time.Time
	// behind: heads were made runnable behind the cursor, where is not
	// known; the next claim looks back from the start.
	behind bool
	// heardBehind: a head was announced behind the cursor (heard); the next
	// claim looks back from the floor before it looks ahead.
	heardBehind bool
	// heardIDs are the heads announced lately (heard), by epoch: a claim
	// sent before one was announced may not see it, so its floor goes no
	// further than the head.
	epoch    uint64
	heardIDs [64]int64
}

// claimFrom is where one claim starts.
type claimFrom struct {
	max      int32 // the most jobs it takes
	priority pgtype.Int2
	id       pgtype.Int8
	floorID  pgtype.Int8
	// full: the claim looks back from the start.
	full bool
	// behindFirst: the claim looks behind the cursor before it looks ahead
	// of it (see pgtask.pick_heads): heads lie there, announced, or a look
	// from the start is due.
	behindFirst bool
	// epoch is the cursor's epoch when the claim was sent (see heardIDs).
	epoch uint64
}

func (c *claimCursor) get(max int32) claimFrom {
	c.mu.Lock()
	defer c.mu.Unlock()
	from := claimFrom{
		max:      max,
		epoch:    c.epoch,
		priority: pgtype.Int2{Int16: c.priority, Valid: c.set},
		id:       pgtype.Int8{Int64: c.id, Valid: c.set},
	}
	if !c.set {
		return from
	}
	now := time.Now()
	if c.behind || !c.floorSet || now.Sub(c.lastFull) >= lookBackEvery {
		c.behind, c.heardBehind, c.lastFull = false, false, now
		from.full, from.behindFirst = true, true
		return from
	}
	if c.floorPriority == c.priority {
		from.floorID = pgtype.Int8{Int64: c.floorID, Valid: true}
	}
	from.behindFirst, c.heardBehind = c.heardBehind, false
	return from
}

// heard lowers the floor to a job that committed after the claims' scans
// may have passed it (its enqueue's notification came), so that claims
// looking back find it without looking from the start.
func (c *claimCursor) heard(id int64) {
	if id <= 0 {
		return
	}
	c.mu.Lock()
	c.epoch++
	c.heardIDs[c.epoch%uint64(len(c.heardIDs))] = id
	if c.floorSet && id < c.floorID {
		c.floorID = id
	}
	if c.set && id <= c.id {
		c.heardBehind = true
	}
	c.mu.Unlock()
}

// lookBehind makes the next claim look back from the start.
func (c *claimCursor) lookBehind() {
	c.mu.Lock()
	c.behind = true
	c.mu.Unlock()
}

// claimed moves the cursor to the last head of a claim that its scans
// found, rows coming in priority, id order. Heads the claim took because
// its transaction promoted them, or found behind the cursor, leave it
// where it is: moved past them, it would pass heads nobody has claimed. A
// claim that came up short looked behind its cursor down to its floor (or
// from the start): its cursor is the new floor, or the lowest head
// announced since it was sent, which it may not have seen.
func (c *claimCursor) claimed(from claimFrom, rows []gen.ClaimJobsRow) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case len(rows) >= int(from.max) && !(from.behindFirst && reachedAhead(from, rows)):
		// A claim that filled up did not look behind its cursor, or not all
		// the way: the next one looks again.
		switch {
		case from.full:
			c.behind = true
		case from.behindFirst:
			c.heardBehind = true
		}
	case from.id.Valid:
		floor := from.id.Int64
		if missed := c.epoch - from.epoch; missed > uint64(len(c.heardIDs)) {
			c.behind = true // too many announced to tell
		} else {
			for e := from.epoch + 1; e <= c.epoch; e++ {
				floor = min(floor, c.heardIDs[e%uint64(len(c.heardIDs))])
			}
		}
		c.floorSet, c.floorPriority, c.floorID = true, from.priority.Int16, floor
	}
	for i := len(rows) - 1; i >= 0; i-- {
		if rows[i].Scanned {
			c.set, c.priority, c.id = true, rows[i].Priority, rows[i].ID
			break
		}
	}
	// Heads announced while the claim ran lay ahead of the cursor then, or
	// heard said so; the claim's scan may not have seen them (they
	// committed after it began) and has moved the cursor past them.
	if missed := c.epoch - from.epoch; missed > uint64(len(c.heardIDs)) {
		c.behind = true
	} else {
		for e := from.epoch + 1; e <= c.epoch; e++ {
			if c.heardIDs[e%uint64(len(c.heardIDs))] <= c.id {
				c.heardBehind = true
			}
		}
	}
}

// reachedAhead reports whether a claim found heads ahead of its cursor, past
// the part behind it: one that looked behind first then saw all of that
// part, as a claim that came up short does.
func reachedAhead(from claimFrom, rows []gen.ClaimJobsRow) bool {
	for _, r := range rows {
		if r.Scanned && (r.Priority > from.priority.Int16 || r.Priority == from.priority.Int16 && r.ID > from.id.Int64) {
			return true
		}
	}
	return false
}

// collectClaim reads a claim's rows into next and moves the cursor.
func (q *queue) collectClaim(from claimFrom, next *[]gen.ClaimJobsRow) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		var err error
		*next, err = pgx.CollectRows(rows, pgx.RowToStructByName[gen.ClaimJobsRow])
		if err != nil {
			return fmt.Errorf("claim jobs: %w", err)
		}
		q.cursor.claimed(from, *next)
		return nil
	}
}
