package runtime

import (
	"testing"
	"time"

	"github.com/pgtask/pgtask/gen"
)

func TestClaimCursorMovesOnlyWithScannedHeadsAndLooksBackFromItsFloor(t *testing.T) {
	var c claimCursor
	from := c.get(10)
	if from.priority.Valid || from.id.Valid || from.floorID.Valid {
		t.Fatalf("a new cursor: %+v, want none", from)
	}
	c.claimed(from, []gen.ClaimJobsRow{{ID: 5, Scanned: true}, {ID: 7, Scanned: true}, {ID: 9}})
	if !c.set || c.id != 7 {
		t.Fatalf("cursor at %d (set %v), want 7: a head the claim did not scan for must not move it", c.id, c.set)
	}
	// No floor yet: the claim looks back from the start, and its cursor
	// becomes the floor.
	from = c.get(10)
	if !from.full || from.floorID.Valid || from.id.Int64 != 7 {
		t.Fatalf("first claim after the cursor: %+v, want a look back from the start after 7", from)
	}
	c.claimed(from, []gen.ClaimJobsRow{{ID: 3}, {ID: 12, Scanned: true}})
	from = c.get(10)
	if from.full || !from.floorID.Valid || from.floorID.Int64 != 7 || from.id.Int64 != 12 {
		t.Fatalf("next claim: %+v, want one after 12 looking back from 7", from)
	}
	c.claimed(from, nil)
	if c.id != 12 {
		t.Fatalf("an empty claim moved the cursor to %d", c.id)
	}
	// Told of heads behind: from the start once, then from the new floor.
	c.lookBehind()
	if from = c.get(10); !from.full {
		t.Fatalf("after lookBehind: %+v, want a look back from the start", from)
	}
	c.claimed(from, nil)
	if from = c.get(10); from.full || from.floorID.Int64 != 12 {
		t.Fatalf("after the look back from the start: %+v, want the floor at 12", from)
	}
	// Once lookBackEvery has passed: from the start again.
	c.lastFull = time.Now().Add(-lookBackEvery)
	if from = c.get(10); !from.full {
		t.Fatalf("%s after the last look back from the start: %+v, want another", lookBackEvery, from)
	}
	// A claim that filled up did not look back: the next one does.
	c.claimed(from, make([]gen.ClaimJobsRow, 10))
	if from = c.get(10); !from.full {
		t.Fatalf("after a full claim that was to look back from the start: %+v, want another", from)
	}
	// A floor at another priority than the cursor's is no floor there.
	c.claimed(from, []gen.ClaimJobsRow{{ID: 20, Priority: 3, Scanned: true}})
	if from = c.get(10); from.full || from.floorID.Valid {
		t.Fatalf("cursor at priority 3, floor at 0: %+v, want no floor", from)
	}
}

func TestAnEnqueuesWakeUpMovesTheFloorBackToItsJob(t *testing.T) {
	for payload, want := range map[string]struct {
		first int64
		queue string
	}{
		"42:default": {42, "default"},
		"7:a:b":      {7, "a:b"},
		"default":    {0, "default"},
		"x:y":        {0, "x:y"},
		"12:":        {12, ""},
	} {
		if first, queue := parseWake(payload); first != want.first || queue != want.queue {
			t.Errorf("parseWake(%q) = %d, %q; want %d, %q", payload, first, queue, want.first, want.queue)
		}
	}
	var c claimCursor
	c.claimed(c.get(10), []gen.ClaimJobsRow{{ID: 50, Scanned: true}})
	from := c.get(10)
	c.claimed(from, []gen.ClaimJobsRow{{ID: 60, Scanned: true}})
	c.heard(70) // ahead of the cursor: the scan finds it
	c.heard(55) // behind the cursor, not behind the floor
	if from = c.get(10); from.full || from.floorID.Int64 != 50 {
		t.Fatalf("%+v, want a look back from 50", from)
	}
	c.heard(20)
	if from = c.get(10); from.full || from.floorID.Int64 != 20 {
		t.Fatalf("after an enqueue of job 20 committed: %+v, want a look back from 20", from)
	}
}

// A claim sent before a head behind its cursor was announced may not see
// it: once it is done, the floor goes back no further than that head.
func TestAClaimDoesNotRaiseTheFloorPastAHeadAnnouncedWhileItRan(t *testing.T) {
	var c claimCursor
	c.claimed(c.get(10), []gen.ClaimJobsRow{{ID: 50, Scanned: true}})
	c.claimed(c.get(10), []gen.ClaimJobsRow{{ID: 60, Scanned: true}})
	from := c.get(10) // after 60, from 50
	c.heard(40)
	c.claimed(from, []gen.ClaimJobsRow{{ID: 70, Scanned: true}})
	if next := c.get(10); next.full || next.floorID.Int64 != 40 {
		t.Fatalf("%+v, want a look back from 40", next)
	}
	// The next short claim, sent after the announcement, saw it.
	c.claimed(c.get(10), nil)
	if next := c.get(10); next.floorID.Int64 != 70 {
		t.Fatalf("%+v, want a look back from 70", next)
	}
}

// A head announced behind the cursor has the next claim look behind first;
// one that fills up there looks again, and one that reaches past the cursor
// saw all of it, as a claim that came up short does.
func TestAClaimLooksBehindFirstAfterAHeadIsAnnouncedThere(t *testing.T) {
	var c claimCursor
	c.claimed(c.get(10), []gen.ClaimJobsRow{{ID: 50, Scanned: true}})
	from := c.get(10)
	if !from.full || !from.behindFirst {
		t.Fatalf("a look back from the start: %+v, want it to look behind first", from)
	}
	c.claimed(from, []gen.ClaimJobsRow{{ID: 60, Scanned: true}}) // short: floor 50
	c.heard(70)                                                  // ahead of the cursor
	if from = c.get(10); from.behindFirst {
		t.Fatalf("after a head announced ahead: %+v, want no look behind first", from)
	}
	c.claimed(from, []gen.ClaimJobsRow{{ID: 70, Scanned: true}}) // short: floor 60
	c.heard(55)                                                  // behind the cursor at 70
	from = c.get(2)
	if !from.behindFirst || from.full || from.floorID.Int64 != 55 {
		t.Fatalf("after a head announced behind: %+v, want a look behind from 55 first", from)
	}
	// Filled up behind the cursor: it may not have seen all of that part.
	c.claimed(from, []gen.ClaimJobsRow{{ID: 55}, {ID: 56}})
	if from = c.get(2); !from.behindFirst || from.floorID.Int64 != 55 {
		t.Fatalf("after a claim that filled up behind: %+v, want another look behind from 55", from)
	}
	// Filled up, but reached past the cursor: it saw all behind it.
	c.claimed(from, []gen.ClaimJobsRow{{ID: 57}, {ID: 80, Scanned: true}})
	if from = c.get(2); from.behindFirst || from.floorID.Int64 != 70 || from.id.Int64 != 80 {
		t.Fatalf("after a claim that reached past its cursor: %+v, want one after 80 with the floor at 70", from)
	}
	// A better priority than the cursor's is ahead of nothing behind it.
	c.heard(60)
	from = c.get(1)
	c.claimed(from, []gen.ClaimJobsRow{{ID: 90, Priority: -1, Scanned: true}})
	if from = c.get(1); !from.behindFirst {
		t.Fatalf("after a claim that filled up with a better priority: %+v, want another look behind first", from)
	}
}

// A head announced while a claim ran, ahead of the cursor then, lies behind
// it once the claim moves it past: the next claim looks behind first.
func TestAHeadAnnouncedWhileAClaimRanIsLookedForBehindTheCursorItMoved(t *testing.T) {
	var c claimCursor
	c.claimed(c.get(10), []gen.ClaimJobsRow{{ID: 100, Scanned: true}})
	c.claimed(c.get(10), nil) // short: floor 100
	from := c.get(10)
	c.heard(150) // ahead of the cursor at 100, committed after the claim's scan began
	rows := make([]gen.ClaimJobsRow, 10)
	for i := range rows {
		rows[i] = gen.ClaimJobsRow{ID: int64(200 + 10*i), Scanned: true}
	}
	c.claimed(from, rows)
	if from = c.get(10); !from.behindFirst || from.floorID.Int64 > 150 {
		t.Fatalf("after a claim moved the cursor past a head announced while it ran: %+v, want a look behind from 150 or lower first", from)
	}
}
