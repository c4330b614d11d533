package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/pgtask/pgtask/gen"
)

// groupRow is a group and its head job.
type groupRow = gen.DashboardBlockedGroupsRow

type groupsPage struct {
	page
	Queue string
	// All lists every group with unfinished work, not only blocked ones.
	All    bool
	Groups []groupRow
	// Behind says, per group, how many of its jobs wait behind the head
	// (blocked groups) or are unfinished (all groups), up to 1,000+.
	Behind []count
	// Next is the next page's link; "" at the end.
	Next string
}

func (h *handler) groupsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	data := groupsPage{page: h.page(r, "groups", "Groups"), Queue: q.Get("queue"), All: q.Get("show") == "all"}
	if data.All {
		data.Title = "All groups"
	} else {
		data.Title = "Blocked groups"
	}
	rows, err := h.listGroups(r.Context(), data.Queue, data.All, q.Get("after_queue"), q.Get("after_group"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if len(rows) > h.bound.page {
		rows = rows[:h.bound.page]
		last := rows[h.bound.page-1]
		v := url.Values{"after_queue": {last.Queue}, "after_group": {last.GroupKey}}
		if data.Queue != "" {
			v.Set("queue", data.Queue)
		}
		if data.All {
			v.Set("show", "all")
		}
		data.Next = h.base + "/groups?" + v.Encode()
	}
	data.Groups = rows
	for _, g := range rows {
		c := count{N: g.Behind}
		if g.Behind > 1000 {
			c = count{N: 1000, More: true}
		}
		data.Behind = append(data.Behind, c)
	}
	h.render(w, r, http.StatusOK, "groups", data)
}

// listGroups reads a page of groups after (afterQueue, afterGroup), one row
// more than a page to know whether another follows: the blocked ones along
// the index of failures that block their group, or all along the groups'
// primary key.
func (h *handler) listGroups(ctx context.Context, queue string, all bool, afterQueue, afterGroup string) ([]groupRow, error) {
	if !all {
		rows, err := h.q.DashboardBlockedGroups(ctx, gen.DashboardBlockedGroupsParams{
			Queue: opt(queue), AfterQueue: afterQueue, AfterGroup: afterGroup, Max: int32(h.bound.page) + 1})
		if err != nil {
			return nil, fmt.Errorf("list blocked groups: %w", err)
		}
		return rows, nil
	}
	rows, err := h.q.DashboardGroups(ctx, gen.DashboardGroupsParams{
		Queue: opt(queue), AfterQueue: afterQueue, AfterGroup: afterGroup, Max: int32(h.bound.page) + 1})
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	out := make([]groupRow, len(rows))
	for i, r := range rows {
		out[i] = groupRow{
			Queue: r.Queue, GroupKey: r.GroupKey, GroupID: r.GroupID, GroupSince: r.GroupSince,
			HeadID: r.HeadID, HeadKind: r.HeadKind, HeadStatus: r.HeadStatus, HeadAttempts: r.HeadAttempts,
			HeadMaxAttempts: r.HeadMaxAttempts, HeadFinishedAt: r.HeadFinishedAt, HeadError: r.HeadError, Behind: r.Unfinished,
		}
	}
	return out, nil
}
