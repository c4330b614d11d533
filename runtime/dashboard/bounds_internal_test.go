package dashboard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// small serves a dashboard with tiny bounds over a database of 30 jobs in
// queue "q" (ids in enqueue order): every third of kind "rare", the rest
// "common"; jobs 0-9 fail, 10-19 are scheduled 1 to 10 hours on, 20-29
// wait in queue.
func small(t *testing.T, b bounds) (*httptest.Server, []runtime.JobID) {
	t.Helper()
	ctx := context.Background()
	url := pgtasktest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var reqs []runtime.EnqueueRequest
	for i := range 10 {
		reqs = append(reqs, request(i))
	}
	ids, err := runtime.EnqueueMany(ctx, pool, reqs)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	w, err := runtime.NewWorker(ctx, pc, runtime.Config{
		Queues: map[string]runtime.QueueConfig{"q": {}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, kind := range []string{"rare", "common"} {
		if err := w.Register(runtime.Registration{Kind: kind, Handler: func(context.Context, *runtime.Job) error {
			return runtime.NoRetry(errors.New("no"))
		}}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := w.Drain(ctx); n != 10 || err != nil {
		t.Fatalf("drain: %d, %v", n, err)
	}
	reqs = reqs[:0]
	for i := 10; i < 30; i++ {
		r := request(i)
		if i < 20 {
			r.Delay = time.Duration(i-9) * time.Hour
		}
		reqs = append(reqs, r)
	}
	more, err := runtime.EnqueueMany(ctx, pool, reqs)
	if err != nil {
		t.Fatal(err)
	}
	h := New(pool, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).(*handler)
	h.bound = b
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, append(ids, more...)
}

func request(i int) runtime.EnqueueRequest {
	kind := "common"
	if i%3 == 0 {
		kind = "rare"
	}
	return runtime.EnqueueRequest{Kind: kind, Payload: []byte(fmt.Sprintf(`{"i":%d}`, i)), EnqueueOptions: runtime.EnqueueOptions{Queue: "q"}}
}

var (
	idCell   = regexp.MustCompile(`<td class="n"><a href="/jobs/(\d+)">`)
	nextLink = regexp.MustCompile(`<a rel="next" href="([^"]+)">([^<]+)</a>`)
)

// walk follows the jobs pages from path to the end and returns the ids in
// the order shown, the number of pages, and how many stopped at the scan
// bound.
func walk(t *testing.T, srv *httptest.Server, path string) (ids []string, pages, stopped int) {
	t.Helper()
	for path != "" && pages < 100 {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var body strings.Builder
		io.Copy(&body, resp.Body) //nolint:errcheck // a short read fails the checks below
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		pages++
		for _, m := range idCell.FindAllStringSubmatch(body.String(), -1) {
			ids = append(ids, m[1])
		}
		if strings.Contains(body.String(), "stopped after looking through") {
			stopped++
		}
		path = ""
		if m := nextLink.FindStringSubmatch(body.String()); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	return ids, pages, stopped
}

func idsOf(js []runtime.JobID, keep func(i int) bool) []string {
	var out []string
	for i, j := range js {
		if keep(i) {
			out = append(out, fmt.Sprint(j))
		}
	}
	return out
}

// Paging in each order shows every matching job once, in order, and a
// sparse filter goes on past the scan bound page by page.
func TestJobsPagingWithinBounds(t *testing.T) {
	t.Parallel()
	srv, ids := small(t, bounds{count: 5, scan: 7, page: 4})
	rev := slices.Clone(ids)
	slices.Reverse(rev)
	for _, tc := range []struct {
		path        string
		want        []string
		pages, stop int
	}{
		// newest first: 30 jobs, 4 a page.
		{"/jobs", idsOf(rev, func(int) bool { return true }), 8, 0},
		// 10 rare ones among 30: each stretch of 7 holds 2 or 3, so every
		// page stops at the bound; the last stretch is short and ends it.
		{"/jobs?kind=rare", idsOf(rev, func(i int) bool { return (29-i)%3 == 0 }), 5, 4},
		// failed, latest finished first: the drain ran them in id order.
		{"/jobs?status=failed", idsOf(rev[20:], func(int) bool { return true }), 3, 0},
		{"/jobs?status=failed&kind=rare", []string{fmt.Sprint(ids[9]), fmt.Sprint(ids[6]), fmt.Sprint(ids[3]), fmt.Sprint(ids[0])}, 2, 1},
		// scheduled, due first: in id order, as their delays grow.
		{"/jobs?status=scheduled", idsOf(ids, func(i int) bool { return i >= 10 && i < 20 }), 3, 0},
		{"/jobs?status=scheduled&kind=common", idsOf(ids, func(i int) bool { return i >= 10 && i < 20 && i%3 != 0 }), 2, 0},
		{"/jobs?status=scheduled&kind=rare", idsOf(ids, func(i int) bool { return i >= 10 && i < 20 && i%3 == 0 }), 2, 1},
	} {
		got, pages, stopped := walk(t, srv, tc.path)
		if !slices.Equal(got, tc.want) || pages != tc.pages || stopped != tc.stop {
			t.Errorf("%s: ids %v in %d pages (%d stopped at the bound), want %v in %d (%d)", tc.path, got, pages, stopped, tc.want, tc.pages, tc.stop)
		}
	}
}

// Counts past the bound show as "5+", with a note for the samples.
func TestQueueCountsStopAtTheBound(t *testing.T) {
	t.Parallel()
	srv, _ := small(t, bounds{count: 5, scan: 7, page: 4})
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	var body strings.Builder
	io.Copy(&body, resp.Body) //nolint:errcheck // checked below
	resp.Body.Close()
	cells := regexp.MustCompile(`(?s)<td class="n">(.*?)</td>`).FindAllStringSubmatch(body.String(), -1)
	var got []string
	for _, c := range cells {
		got = append(got, strings.TrimSpace(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(c[1], "")))
	}
	// scheduled, runnable, in groups, on a limit, on a rate, running,
	// oldest wait, blocked, last minute, succeeded, failed, cancelled
	want := []string{"5&#43;", "5&#43;", "0", "0", "0", "0", "?", "0", "6&#43;", "0", "5&#43;", "0"}
	if len(got) == len(want) {
		got[6] = "?" // the oldest wait
	}
	if !slices.Equal(got, want) {
		t.Errorf("queue q's counts %q, want %q: 5+ scheduled, runnable and failed, and 6+ in the last minute", got, want)
	}
	for _, want := range []string{
		"More than 5 jobs are scheduled: each queue&#39;s count is of the 6 due first.",
		"More than 5 jobs failed in the last hour: each queue&#39;s count is of the latest 6, which reach back",
		"Counts stop at 5",
	} {
		if !strings.Contains(body.String(), want) {
			t.Errorf("queues page lacks %q", want)
		}
	}
}

func TestCSRFToken(t *testing.T) {
	k, other := newCSRFKey(), newCSRFKey()
	now := time.Now()
	tok := k.token("ops", now)
	for _, tc := range []struct {
		name  string
		check error
		want  error
	}{
		{"same user, now", k.check(tok, "ops", now), nil},
		{"an hour on", k.check(tok, "ops", now.Add(time.Hour)), nil},
		{"past its life", k.check(tok, "ops", now.Add(csrfTTL+time.Second)), errExpiredToken},
		{"from the future", k.check(k.token("ops", now.Add(time.Hour)), "ops", now), errExpiredToken},
		{"another user", k.check(tok, "eve", now), errBadToken},
		{"another key", other.check(tok, "ops", now), errBadToken},
		{"empty", k.check("", "ops", now), errNoToken},
		{"not base64", k.check("!!", "ops", now), errBadToken},
		{"cut short", k.check(tok[:20], "ops", now), errBadToken},
	} {
		if !errors.Is(tc.check, tc.want) && tc.check != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.check, tc.want)
		}
	}
}

func TestFormatting(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -12345: "-12,345"} {
		if got := num(n); got != want {
			t.Errorf("num(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{
		450 * time.Millisecond: "450ms", 12 * time.Second: "12s", 190 * time.Second: "3m 10s",
		2*time.Hour + 5*time.Minute: "2h 5m", 76 * time.Hour: "3d 4h",
	} {
		if got := duration(d); got != want {
			t.Errorf("duration(%s) = %q, want %q", d, got, want)
		}
	}
	if got := (count{N: 10_000, More: true}).String(); got != "10,000+" {
		t.Errorf("a count past its bound reads %q", got)
	}
	if got := trim(8, "a\n  long   error text"); got != "a long …" {
		t.Errorf("trim: %q", got)
	}
}

// The limits page lists a page of keys at a time, and counts each key's
// waiting jobs up to the bound.
func TestLimitsPageStaysBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtasktest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// Keys k0 to k4 of queue q, each limited to 1 with 4 jobs: 3 waiting.
	var reqs []runtime.EnqueueRequest
	for i := range 20 {
		reqs = append(reqs, runtime.EnqueueRequest{Kind: "k", Payload: []byte(`{}`),
			EnqueueOptions: runtime.EnqueueOptions{Queue: "q", Limit: 1, LimitKey: fmt.Sprintf("k%d", i%5)}})
	}
	if _, err := runtime.EnqueueMany(ctx, pool, reqs); err != nil {
		t.Fatal(err)
	}
	h := New(pool, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).(*handler)
	h.bound = bounds{count: 2, scan: 100, page: 2}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	keyRE := regexp.MustCompile(`(?s)<td>(k\d)</td>.*?<td class="n">.*?</td>.*?<td class="n">.*?</td>.*?<td class="n">(?:<[^>]*>)?([^<]*)(?:<[^>]*>)?</td>\s*<td class="n">(?:<[^>]*>)?([^<]*)`)
	var keys []string
	path, pages := "/limits?queue=q", 0
	for path != "" && pages < 10 {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var body strings.Builder
		io.Copy(&body, resp.Body) //nolint:errcheck // checked below
		resp.Body.Close()
		pages++
		for _, m := range keyRE.FindAllStringSubmatch(body.String(), -1) {
			keys = append(keys, m[1])
			if m[2] != "0" || m[3] != "2&#43;" {
				t.Errorf("key %s: running %q, waiting %q; want 0 and 2+ (the bound)", m[1], m[2], m[3])
			}
		}
		path = ""
		if m := regexp.MustCompile(`<a rel="next" href="([^"]+)">`).FindStringSubmatch(body.String()); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	if want := []string{"k0", "k1", "k2", "k3", "k4"}; !slices.Equal(keys, want) || pages != 3 {
		t.Errorf("keys %v in %d pages, want %v in 3", keys, pages, want)
	}
}

// The batches page lists a page of batches at a time; a batch's page, a
// page of its jobs, and counts an open batch's jobs up to the scan bound.
func TestBatchPagesStayBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtasktest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var batches []runtime.BatchID
	var jobs []runtime.JobID
	for range 5 {
		reqs := make([]runtime.EnqueueRequest, 5)
		for i := range reqs {
			reqs[i] = runtime.EnqueueRequest{Kind: "k", Payload: []byte(`{}`), EnqueueOptions: runtime.EnqueueOptions{Queue: "q"}}
		}
		id, ids, err := runtime.EnqueueBatch(ctx, pool, reqs, runtime.BatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		batches, jobs = append(batches, id), ids
	}
	h := New(pool, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).(*handler)
	h.bound = bounds{count: 2, scan: 3, page: 2}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	walk := func(path string, re *regexp.Regexp) (found []string, pages int, last string) {
		for path != "" && pages < 10 {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			var body strings.Builder
			io.Copy(&body, resp.Body) //nolint:errcheck // checked below
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %s", path, resp.Status)
			}
			pages++
			last = body.String()
			for _, m := range re.FindAllStringSubmatch(last, -1) {
				found = append(found, m[1])
			}
			path = ""
			if m := regexp.MustCompile(`<a rel="next" href="([^"]+)">`).FindStringSubmatch(last); m != nil {
				path = strings.ReplaceAll(m[1], "&amp;", "&")
			}
		}
		return found, pages, last
	}
	ids := func(xs ...int64) []string {
		var out []string
		for _, x := range xs {
			out = append(out, fmt.Sprint(x))
		}
		return out
	}
	listed, pages, _ := walk("/batches", regexp.MustCompile(`<td><a href="/batches/(\d+)">`))
	want := ids(int64(batches[4]), int64(batches[3]), int64(batches[2]), int64(batches[1]), int64(batches[0]))
	if !slices.Equal(listed, want) || pages != 3 {
		t.Errorf("batches %v in %d pages, want %v in 3", listed, pages, want)
	}
	listed, pages, page := walk(fmt.Sprintf("/batches/%d", batches[4]), regexp.MustCompile(`<td><a href="/jobs/(\d+)">`))
	want = ids(int64(jobs[0]), int64(jobs[1]), int64(jobs[2]), int64(jobs[3]), int64(jobs[4]))
	if !slices.Equal(listed, want) || pages != 3 {
		t.Errorf("the batch's jobs %v in %d pages, want %v in 3", listed, pages, want)
	}
	if !strings.Contains(page, "Now, of its first 3 jobs</dt><dd>0 succeeded, 0 failed, 0 cancelled, 3 not finished") {
		t.Errorf("an open batch's counts, bounded to 3 jobs:\n%s", page)
	}
}
