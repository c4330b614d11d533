package dashboard_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/dashboard"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

var (
	figureRE = regexp.MustCompile(`(?s)<figure class="chart"[ >].*?</figure>`)
	barRE    = regexp.MustCompile(`<rect class="(ok|bad)" x="([0-9.]+)" y="([0-9.]+)" width="6" height="([0-9.]+)"><title>([^<]*)</title></rect>`)
)

// chart is a queue's chart on the queues page: its caption, and its bars
// as "class x y height title".
func chart(t *testing.T, body, queue string) (caption string, bars []string) {
	t.Helper()
	for _, fig := range figureRE.FindAllString(body, -1) {
		caption := text(tagRE.ReplaceAllString(fig[:strings.Index(fig, "</figcaption>")], ""))
		if !strings.HasPrefix(caption, queue+":") {
			continue
		}
		if n := strings.Count(fig, "<rect"); n != len(barRE.FindAllString(fig, -1)) {
			t.Fatalf("%s's chart has %d rects, of which %d read as bars:\n%s", queue, n, len(barRE.FindAllString(fig, -1)), fig)
		}
		for _, m := range barRE.FindAllStringSubmatch(fig, -1) {
			bars = append(bars, strings.Join(m[1:], " "))
		}
		return caption, bars
	}
	t.Fatalf("no chart for %s on the queues page:\n%s", queue, body)
	return "", nil
}

// The queues page draws each queue's last hour, a bar a minute: succeeded
// under failed, scaled to the busiest minute, the latest minute on the
// right; jobs that finished over an hour ago are not drawn.
func TestQueuesChart(t *testing.T) {
	t.Parallel()
	s := seed(t)
	ctx := context.Background()
	q := testdb.New(s.pool)
	for id, age := range map[runtime.JobID]float64{s.sent: 5.4 * 60, s.crashed: 5.6 * 60, s.bounced: 30.5 * 60, s.blocker: 90 * 60} {
		must(t, q.BackdateFinished(ctx, testdb.BackdateFinishedParams{ID: int64(id), AgeSeconds: age}))
	}
	c := newDashboard(t, s, dashboard.Options{})
	body := c.get("/")

	caption, bars := chart(t, body, "emails")
	if want := "emails: 1 succeeded, 2 failed; at most 2 a minute"; caption != want {
		t.Errorf("emails chart's caption %q, want %q", caption, want)
	}
	// Minute 30 is the 30th bar from the right (x = (59-30)*8+1), minute 5
	// the 5th; a bar of 2 jobs is 48 high from the baseline at 52.
	want := []string{
		"bad 233 28 24 1 failed 30–31 minutes ago",
		"ok 433 28 24 1 succeeded 5–6 minutes ago",
		"bad 433 4 24 1 failed 5–6 minutes ago",
	}
	if !slices.Equal(bars, want) {
		t.Errorf("emails chart's bars\n%q\nwant\n%q", bars, want)
	}
	caption, bars = chart(t, body, "reports")
	if caption != "reports: 0 succeeded, 0 failed" || len(bars) != 0 {
		t.Errorf("reports' chart, whose one failure was 90 minutes ago: %q, bars %q", caption, bars)
	}
	if r := row(body, "emails"); r[10] != "0" || r[11] != "1" || r[12] != "2" {
		t.Errorf("emails row %q: want 0 in the last minute, 1 succeeded and 2 failed in the hour", r)
	}
	if r := row(body, "reports"); r[12] != "0" {
		t.Errorf("reports row %q: want no failure in the hour", r)
	}

	// The job that finished this minute is the rightmost bar.
	must(t, q.BackdateFinished(ctx, testdb.BackdateFinishedParams{ID: int64(s.crashed), AgeSeconds: 1}))
	_, bars = chart(t, c.get("/"), "emails")
	if want := []string{"bad 233 4 48 1 failed 30–31 minutes ago", "ok 433 4 48 1 succeeded 5–6 minutes ago", "bad 473 4 48 1 failed in the last minute"}; !slices.Equal(bars, want) {
		t.Errorf("emails chart's bars\n%q\nwant\n%q", bars, want)
	}
}
