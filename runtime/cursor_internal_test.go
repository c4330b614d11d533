package runtime

import (
	"testing"
	"time"

	"github.com/pgtask/pgtask/gen"
)

// The cursor starts claims at the last head claimed; after a claim that
// found nothing, at where it was a lag before (late commits); once every
// rewind interval, at the beginning. Drain and WorkOne rewind it.
func TestClaimCursorStartsWhereClaimsGot(t *testing.T) {
	defer func(lag, every time.Duration) { claimCursorLag, claimRewindEvery = lag, every }(claimCursorLag, claimRewindEvery)
	claimCursorLag, claimRewindEvery = 50*time.Millisecond, time.Hour
	var c claimCursor
	at := func() (int16, int64, bool) {
		p, id := c.get()
		return p.Int16, id.Int64, id.Valid
	}
	claimed := func(p int16, ids ...int64) {
		rows := make([]gen.ClaimJobsRow, len(ids))
		for i, id := range ids {
			rows[i] = gen.ClaimJobsRow{ID: id, Priority: p}
		}
		c.moveTo(rows, func() {})
	}
	if _, _, set := at(); set {
		t.Fatal("a new cursor's first claim should start at the beginning")
	}
	claimed(0, 10, 20)
	if p, id, _ := at(); p != 0 || id != 20 {
		t.Fatalf("after claiming up to 20: starts at (%d, %d), want (0, 20)", p, id)
	}
	time.Sleep(2 * claimCursorLag)
	at() // a lag on: 20 is marked
	claimed(0, 30)
	time.Sleep(2 * claimCursorLag)
	claimed(0) // dry
	if p, id, _ := at(); p != 0 || id != 20 {
		t.Fatalf("after a dry claim: starts at (%d, %d), want (0, 20), where the cursor was a lag before", p, id)
	}
	claimed(0, 25) // a late head behind the cursor
	if _, id, _ := at(); id != 25 {
		t.Fatalf("after claiming a head behind it: starts at %d, want 25, to take those after it", id)
	}
	claimed(-1, 7) // a better priority
	if p, id, _ := at(); p != -1 || id != 7 {
		t.Fatalf("after claiming a better priority's head: starts at (%d, %d), want (-1, 7)", p, id)
	}
	c.rewind()
	if _, _, set := at(); set {
		t.Fatal("after rewind: should start at the beginning")
	}
	if _, _, set := at(); !set {
		t.Fatal("the claim after a rewind's should start at the cursor")
	}
	claimRewindEvery = 0
	if _, _, set := at(); set {
		t.Fatal("a rewind should start at the beginning")
	}
}
