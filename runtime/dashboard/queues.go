package dashboard

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
)

// queueLine is a queue's row on the queues page.
type queueLine struct {
	Name     string
	PausedAt *time.Time
	// Now: jobs waiting for their time, runnable now (their group's head,
	// ungrouped, or admitted by their concurrency limit), waiting behind
	// their group's head, waiting for a slot of their concurrency limit,
	// waiting for a token of their rate limit, running; groups a failure blocks; how long the longest-waiting of the
	// next 100 in line has waited.
	Scheduled, Runnable, Waiting, OnLimit, OnRate, Running, Blocked count
	OldestWait                                                      time.Duration
	// The last hour: jobs that finished, by status.
	Succeeded, Failed, Cancelled count
	// LastMinute is how many jobs finished in the last minute.
	LastMinute count
	// Minutes are the jobs that succeeded and failed in each minute of the
	// last hour, minute 0 the latest.
	Minutes [chartMinutes]minute
	// Cut is true when the minutes count the latest jobs of a bounded
	// sample, which reach back less than the hour.
	Cut bool
}

type queuesPage struct {
	page
	Queues []*queueLine
	// Notes explain the counts that reached their bound.
	Notes []string
	// Unhandled are the kinds among each queue's next 100 runnable jobs
	// that no live worker handles: they wait for one that does.
	Unhandled []gen.DashboardUnhandledKindsRow
}

func (h *handler) queuesPage(w http.ResponseWriter, r *http.Request) {
	lines, notes, err := h.loadQueues(r.Context())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	names := make([]string, len(lines))
	for i, l := range lines {
		names[i] = l.Name
	}
	unhandled, err := h.q.DashboardUnhandledKinds(r.Context(), names)
	if err != nil {
		h.fail(w, r, fmt.Errorf("find kinds no worker handles: %w", err))
		return
	}
	h.render(w, r, http.StatusOK, "queues", queuesPage{page: h.page(r, "queues", "Queues"), Queues: lines, Notes: notes, Unhandled: unhandled})
}

// loadQueues reads the queues page: four statements, each bounded (see
// queries/dashboard.sql).
func (h *handler) loadQueues(ctx context.Context) ([]*queueLine, []string, error) {
	names, err := h.q.DashboardQueueNames(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("list queues: %w", err)
	}
	waiting, err := h.q.DashboardWaitingSample(ctx, int32(h.bound.count)+1)
	if err != nil {
		return nil, nil, fmt.Errorf("count scheduled and running jobs: %w", err)
	}
	finished, err := h.q.DashboardFinishedSample(ctx, int32(h.bound.count)+1)
	if err != nil {
		return nil, nil, fmt.Errorf("count finished jobs: %w", err)
	}
	byName := map[string]*queueLine{}
	line := func(name string) *queueLine {
		if byName[name] == nil {
			byName[name] = &queueLine{Name: name}
		}
		return byName[name]
	}
	for _, n := range names {
		line(n)
	}
	for _, s := range waiting {
		line(s.Queue)
	}
	for _, s := range finished {
		line(s.Queue)
	}
	sorted := slices.Sorted(maps.Keys(byName))
	rows, err := h.q.DashboardQueueLines(ctx, gen.DashboardQueueLinesParams{Probe: int32(h.bound.count) + 1, Queues: sorted})
	if err != nil {
		return nil, nil, fmt.Errorf("count queued jobs: %w", err)
	}
	for _, row := range rows {
		l := line(row.Queue)
		l.PausedAt = row.PausedAt
		l.Runnable, l.Blocked = bounded(row.Runnable, h.bound.count), bounded(row.BlockedGroups, h.bound.count)
		l.Waiting = count{N: row.Waiting, More: row.GroupJobsWalked > h.bound.count}
		l.OnLimit = bounded(row.OnLimit, h.bound.count)
		l.OnRate = bounded(row.OnRate, h.bound.count)
		l.OldestWait = time.Duration(row.OldestWaitSeconds * float64(time.Second))
	}
	notes := addWaiting(line, sorted, waiting, h.bound.count)
	notes = append(notes, addFinished(line, sorted, finished, h.bound.count)...)
	out := make([]*queueLine, len(sorted))
	for i, name := range sorted {
		out[i] = byName[name]
	}
	return out, notes, nil
}

// of is the field of l that counts jobs of status s on the queues page.
func (l *queueLine) of(s runtime.Status) *count {
	switch s {
	case runtime.StatusScheduled:
		return &l.Scheduled
	case runtime.StatusStarted:
		return &l.Running
	case runtime.StatusSucceeded:
		return &l.Succeeded
	case runtime.StatusFailed:
		return &l.Failed
	case runtime.StatusCancelled:
		return &l.Cancelled
	}
	return new(count) // not shown
}

// addWaiting sets the scheduled and running counts. Their indexes hold no
// queue, so the counts per queue come from the first bound+1 jobs of
// each status: exact when there are no more, lower bounds otherwise.
func addWaiting(line func(string) *queueLine, names []string, rows []gen.DashboardWaitingSampleRow, bound int64) []string {
	total := map[runtime.Status]int64{}
	for _, s := range rows {
		total[runtime.Status(s.Status)] += s.Jobs
	}
	for _, s := range rows {
		st := runtime.Status(s.Status)
		*line(s.Queue).of(st) = count{N: min(s.Jobs, bound), More: total[st] > bound}
	}
	var notes []string
	for _, st := range []runtime.Status{runtime.StatusScheduled, runtime.StatusStarted} {
		if total[st] <= bound {
			continue
		}
		for _, name := range names {
			line(name).of(st).More = true
		}
		which := "the " + num(bound+1) + " due first"
		if st == runtime.StatusStarted {
			which = num(bound+1) + " of them"
		}
		notes = append(notes, fmt.Sprintf("More than %s jobs are %s: each queue's count is of %s.", num(bound), st, which))
	}
	return notes
}

// addFinished sets the last hour's counts, the last minute's and the
// minutes the chart draws. The latest bound+1 jobs of each finished status
// in the last hour are read, by minute: when a status has more, its counts
// are of those, which reach back less than an hour (and maybe less than a
// minute), and show as lower bounds.
func addFinished(line func(string) *queueLine, names []string, rows []gen.DashboardFinishedSampleRow, bound int64) []string {
	type queueStatus struct {
		queue  string
		status runtime.Status
	}
	total := map[runtime.Status]int64{}
	jobs := map[queueStatus]int64{}
	earliest := map[runtime.Status]time.Time{}
	var now time.Time
	for _, s := range rows {
		st, l := runtime.Status(s.Status), line(s.Queue)
		total[st] += s.Jobs
		jobs[queueStatus{s.Queue, st}] += s.Jobs
		if e, ok := earliest[st]; !ok || s.Earliest.Before(e) {
			earliest[st] = s.Earliest
		}
		now = s.Now
		if s.MinutesAgo == 0 {
			l.LastMinute.N += s.Jobs
		}
		if m := s.MinutesAgo; m >= 0 && m < chartMinutes {
			switch st {
			case runtime.StatusSucceeded:
				l.Minutes[m].Succeeded += s.Jobs
			case runtime.StatusFailed:
				l.Minutes[m].Failed += s.Jobs
			}
		}
	}
	for k, n := range jobs {
		l := line(k.queue)
		capped := total[k.status] > bound
		*l.of(k.status) = count{N: min(n, bound), More: capped}
		l.LastMinute.More = l.LastMinute.More || capped && now.Sub(earliest[k.status]) < time.Minute
	}
	var notes []string
	for _, st := range []runtime.Status{runtime.StatusSucceeded, runtime.StatusFailed, runtime.StatusCancelled} {
		if total[st] <= bound {
			continue
		}
		for _, name := range names {
			line(name).of(st).More = true
			line(name).Cut = line(name).Cut || st != runtime.StatusCancelled
		}
		notes = append(notes, fmt.Sprintf("More than %s jobs %s in the last hour: each queue's count is of the latest %s, which reach back %s.",
			num(bound), st, num(bound+1), duration(now.Sub(earliest[st]))))
	}
	return notes
}
