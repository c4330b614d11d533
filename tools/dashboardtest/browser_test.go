package dashboardtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/dashboard"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// screenshots is where the test saves a picture of each page;
// docs/dashboard.md shows one.
const screenshots = "../../docs/screenshots"

// writeScreenshots asks for the screenshots in docs/screenshots, which are
// tracked: without it they go to a temporary folder.
var writeScreenshots = flag.Bool("screenshots", false, "save the screenshots of the pages into docs/screenshots (tracked files docs/dashboard.md shows)")

// screenshotDir is the folder the test's screenshots go to: docs/screenshots
// with -screenshots, a temporary one otherwise.
func screenshotDir(t *testing.T) string {
	t.Helper()
	if *writeScreenshots {
		return screenshots
	}
	return t.TempDir()
}

// trackedShots reads the screenshots in docs/screenshots, by name.
func trackedShots(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(screenshots, "*.png"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = string(b)
	}
	return out
}

// chromium finds the browser, or skips the test without one: unless CI is
// set, where a missing browser is a failure (.ci/run installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if ci := os.Getenv("CI"); ci != "" && ci != "0" && ci != "false" {
		t.Fatal("no chromium binary on PATH, and CI is set: install Debian's chromium package (apt-get install -y chromium), as .ci/run does")
	}
	t.Skip("no chromium binary on PATH (looked for chromium, chromium-browser, google-chrome): install Debian's chromium package to run the browser test")
	return ""
}

// demo is a database with the jobs a person would look at: sent and bounced
// emails, a report that panicked and blocks its group, webhooks waiting.
type demo struct {
	pool                       *pgxpool.Pool
	bounced, crashed, retrying runtime.JobID
}

func seed(t *testing.T) *demo {
	t.Helper()
	ctx := context.Background()
	url := pgtasktest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d := &demo{pool: pool}
	enq := func(kind, payload string, o runtime.EnqueueOptions) runtime.JobID {
		t.Helper()
		id, err := runtime.Enqueue(ctx, pool, runtime.EnqueueRequest{Kind: kind, Payload: []byte(payload), EnqueueOptions: o})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	emails := runtime.EnqueueOptions{Queue: "emails"}
	for i := range 6 {
		enq("send_email", fmt.Sprintf(`{"to":"user%d@example.com","template":"welcome"}`, i), emails)
	}
	d.bounced = enq("send_email", `{"to":"nobody@example.com","template":"invoice"}`, emails)
	d.retrying = enq("send_email", `{"to":"slow@example.com","template":"invoice"}`, emails)
	enq("build_report", `{"account":42,"month":"2024-05"}`, runtime.EnqueueOptions{Queue: "reports", Group: "acct-42"})
	d.crashed = enq("build_report", `{"account":17,"month":"2024-05"}`,
		runtime.EnqueueOptions{Queue: "reports", Group: "acct-17", FailBlocksGroup: true, MaxAttempts: 1})
	for i := range 2 {
		enq("deliver_webhook", fmt.Sprintf(`{"endpoint":"https://hooks.example.com/%d","event":"invoice.paid"}`, i), runtime.EnqueueOptions{Queue: "webhooks"})
	}

	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	w, err := runtime.NewWorker(ctx, pc, runtime.Config{
		Queues: map[string]runtime.QueueConfig{"emails": {}, "reports": {}, "webhooks": {}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, r := range []runtime.Registration{
		{Kind: "send_email", Backoff: runtime.Backoff{Min: time.Hour}, Handler: func(_ context.Context, job *runtime.Job) error {
			switch job.ID {
			case d.bounced:
				return runtime.NoRetry(errors.New("smtp: 550 5.1.1 <nobody@example.com>: mailbox unavailable"))
			case d.retrying:
				return errors.New("smtp: 421 4.7.0 try again later")
			}
			return job.SetResult(map[string]string{"message_id": fmt.Sprintf("<%d@mail.example.com>", job.ID)})
		}},
		{Kind: "build_report", Handler: func(_ context.Context, job *runtime.Job) error {
			if job.ID == d.crashed {
				var totals map[string]int
				totals["net"]++ // a bug: the map was never made
			}
			return job.SetResult(map[string]any{"rows": 1280, "file": "reports/2024-05/acct-42.csv"})
		}},
		{Kind: "deliver_webhook", Handler: func(context.Context, *runtime.Job) error { return nil }},
	} {
		if err := w.Register(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	// What waits now: reports behind the blocked group, scheduled and
	// queued emails and webhooks, and a cancelled webhook.
	for i := range 2 {
		enq("build_report", fmt.Sprintf(`{"account":17,"month":"2024-0%d"}`, 6+i), runtime.EnqueueOptions{Queue: "reports", Group: "acct-17"})
	}
	for i := range 3 {
		enq("send_email", fmt.Sprintf(`{"to":"later%d@example.com","template":"reminder"}`, i), runtime.EnqueueOptions{Queue: "emails", Delay: 30 * time.Minute})
	}
	for i := range 5 {
		enq("deliver_webhook", fmt.Sprintf(`{"endpoint":"https://hooks.example.com/%d","event":"invoice.created"}`, i), runtime.EnqueueOptions{Queue: "webhooks"})
	}
	gone := enq("deliver_webhook", `{"endpoint":"https://hooks.example.com/old","event":"invoice.created"}`, runtime.EnqueueOptions{Queue: "webhooks"})
	if ok, err := runtime.CancelJob(ctx, pool, gone); !ok || err != nil {
		t.Fatalf("cancel %d: %v, %v", gone, ok, err)
	}
	return d
}

// browser starts headless Chromium with page scripts disabled, as a person
// who turned JavaScript off reads the dashboard.
func browser(t *testing.T, path string) context.Context {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 860))...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	_, err := chromedp.Run(ctx, func(ctx context.Context, t *chromedp.Target) (cdp.Empty, error) {
		return cdp.Call(ctx, t, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
	})
	if err != nil {
		t.Fatalf("start chromium at %s: %v", path, err)
	}
	return ctx
}

// page is the test's view of the browser tab.
type page struct {
	t    *testing.T
	ctx  context.Context
	base string
	// shots is where shot saves its pictures.
	shots string
}

// open loads path and waits for its heading.
func (p *page) open(path string) {
	p.t.Helper()
	p.do(chromedp.Navigate(p.base+path), chromedp.WaitVisible(chromedp.CSS("h1")))
}

func (p *page) do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.t.Fatal(err)
	}
}

// click clicks what sel selects and waits for the page it leads to, which
// must load with 200.
func (p *page) click(sel string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(sel, chromedp.NodeVisible))
	if err != nil {
		p.t.Fatalf("click %s: %v", sel, err)
	}
	if resp.Status != 200 {
		p.t.Fatalf("click %s: the page it led to answered %d %s", sel, resp.Status, resp.StatusText)
	}
	p.do(chromedp.WaitVisible(chromedp.CSS("h1")))
}

// text is what a person reads in the element sel selects.
func (p *page) text(sel string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(sel))
	if err != nil {
		p.t.Fatalf("read %s: %v", sel, err)
	}
	return s
}

// rowText is the text of the table row whose first cell is first, cells
// joined by " | ".
func (p *page) rowText(first string) string {
	p.t.Helper()
	for _, line := range strings.Split(p.text("main table"), "\n") {
		cells := strings.Split(line, "\t")
		if strings.TrimSpace(cells[0]) == first {
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			return strings.Join(cells, " | ")
		}
	}
	p.t.Fatalf("no row starts with %q in:\n%s", first, p.text("main table"))
	return ""
}

// shot saves a screenshot of the whole page as name.png in p.shots.
func (p *page) shot(name string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatal(err)
	}
	if err := os.MkdirAll(p.shots, 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.shots, name+".png"), png, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// chart is what the queues page's chart of queue shows: its caption, and
// its bars as "class: tooltip", left to right.
func (p *page) chart(queue string) (caption string, bars []string) {
	p.t.Helper()
	fig := fmt.Sprintf(`figure[data-queue=%q]`, queue)
	caption = strings.Join(strings.Fields(p.text(fig+" figcaption")), " ")
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	rects, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSSAll(fig+" svg rect"), chromedp.AtLeast(0)))
	if err != nil {
		p.t.Fatalf("read %s's bars: %v", queue, err)
	}
	for _, r := range rects {
		title, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.NodeIDs{r.NodeID}))
		if err != nil {
			p.t.Fatalf("read a bar's tooltip: %v", err)
		}
		bars = append(bars, r.AttributeValue("class")+": "+strings.TrimSpace(title))
	}
	return caption, bars
}

// want fails the test unless the element sel selects shows each of wants,
// white space aside.
func (p *page) want(sel string, wants ...string) {
	p.t.Helper()
	got := p.text(sel)
	flat := strings.Join(strings.Fields(got), " ")
	for _, w := range wants {
		if !strings.Contains(flat, strings.Join(strings.Fields(w), " ")) {
			p.t.Errorf("%s does not show %q; it reads:\n%s", sel, w, got)
		}
	}
}

// A person walks the dashboard in Chromium with JavaScript off: reads the
// queues, filters the jobs, opens a failed job and retries it, looks at a
// panic's stack and the blocked group, and pauses a queue.
func TestDashboardInChromium(t *testing.T) {
	path := chromium(t)
	if !*writeScreenshots {
		before := trackedShots(t)
		t.Cleanup(func() {
			if !maps.Equal(trackedShots(t), before) {
				t.Error("the test changed docs/screenshots without -screenshots")
			}
		})
	}
	d := seed(t)
	srv := httptest.NewServer(dashboard.New(d.pool, dashboard.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	defer srv.Close()
	p := &page{t: t, ctx: browser(t, path), base: srv.URL, shots: screenshotDir(t)}

	// The queues: counts by status now and over the last hour.
	p.open("/")
	for queue, want := range map[string]string{
		"emails":   "emails | running | 4 | 0 | 0 | 0 | 0 | 0 | – | 0 | 7 | 6 | 1 | 0 | Pause",
		"reports":  "reports | running | 0 | 0 | 2 | 0 | 0 | 0 | – | 1 | 2 | 1 | 1 | 0 | Pause",
		"webhooks": "webhooks | running | 0 | 5 | 0 | 0 | 0 | 0 |",
	} {
		if got := p.rowText(queue); !strings.HasPrefix(got, want) {
			t.Errorf("queues page, %s: %q, want it to start %q", queue, got, want)
		}
	}

	// The last hour, a bar a minute: every job finished moments ago, so
	// each queue has a bar in the last minute, succeeded under failed.
	for queue, want := range map[string]struct {
		caption string
		bars    []string
	}{
		"emails":   {"emails: 6 succeeded, 1 failed; at most 7 a minute", []string{"ok: 6 succeeded in the last minute", "bad: 1 failed in the last minute"}},
		"reports":  {"reports: 1 succeeded, 1 failed; at most 2 a minute", []string{"ok: 1 succeeded in the last minute", "bad: 1 failed in the last minute"}},
		"webhooks": {"webhooks: 2 succeeded, 0 failed; at most 2 a minute", []string{"ok: 2 succeeded in the last minute"}},
	} {
		if caption, bars := p.chart(queue); caption != want.caption || !slices.Equal(bars, want.bars) {
			t.Errorf("%s's chart: %q, bars %q; want %q, bars %q", queue, caption, bars, want.caption, want.bars)
		}
	}

	// Auto-refresh, turned on through the footer's link: the page reloads
	// itself (no script runs), until it is turned off.
	p.click(`footer a.refresh`)
	p.want("footer", "It reloads every 10 seconds")
	p.click(`footer a.refresh`)
	p.want("footer", "Reload the page to refresh")
	p.open("/?refresh=2")
	read := p.text("footer")
	p.do(chromedp.Sleep(3500 * time.Millisecond))
	if again := p.text("footer"); again == read {
		t.Errorf("the page with refresh=2 did not reload in 3.5 seconds: its footer still reads %q", again)
	}

	// The jobs: every one, then the failed ones through the filter form.
	p.open("/jobs")
	p.want("main table", "deliver_webhook", "cancelled", "scheduled", "queued", "succeeded", "failed")
	p.shot("jobs")
	p.do(chromedp.SendKeys(chromedp.CSS(`select[name="status"]`), "failed"), chromedp.SendKeys(chromedp.CSS(`input[name="queue"]`), "emails"))
	p.click(`form.filter button[type="submit"]`)
	p.want("main", "latest finished first")
	if got := p.rowText(fmt.Sprint(d.bounced)); !strings.Contains(got, "| failed | 1/20 |") || !strings.HasSuffix(got, "smtp: 550 5.1.1 <nobody@example.com>: mailbox unavailable") {
		t.Errorf("the failed emails list shows the bounce as %q", got)
	}
	if n := strings.Count(p.text("main table tbody"), "\n") + 1; n != 1 {
		t.Errorf("the failed emails list has %d rows, want the bounce alone:\n%s", n, p.text("main table tbody"))
	}

	// The bounced job, retried through its form.
	p.click(fmt.Sprintf(`a[href="/jobs/%d"]`, d.bounced))
	p.want("main", "mailbox unavailable", `"template": "invoice"`, "Attempts 1 of 20", "Timeline")
	p.click(fmt.Sprintf(`form[action="/jobs/%d/retry"] button`, d.bounced))
	p.want(".flash", fmt.Sprintf("Job #%d is back in line", d.bounced))
	p.want("h1", "queued")
	if j, err := runtime.GetJob(context.Background(), d.pool, d.bounced); err != nil || j.Status != runtime.StatusQueued || j.Attempts != 0 {
		t.Errorf("after the retry the job is %+v (%v), want queued with no attempts", j, err)
	}

	// The report that panicked: its error, and its stack once opened.
	p.open(fmt.Sprintf("/jobs/%d", d.crashed))
	p.want("main", "assignment to entry in nil map", "panic", "Group acct-17")
	p.do(chromedp.Click(chromedp.CSS("details summary"), chromedp.NodeVisible), chromedp.WaitVisible(chromedp.CSS("pre.stack")))
	p.want("pre.stack", "goroutine", "browser_test.go")
	p.shot("job")

	// The group it blocks, with the jobs waiting behind it.
	p.open("/groups")
	if got := p.rowText("reports"); !strings.HasPrefix(got, fmt.Sprintf("reports | acct-17 | %d | build_report | failed | 1/1 |", d.crashed)) ||
		!strings.Contains(got, "| 2 | panic") || !strings.Contains(got, "nil map") {
		t.Errorf("the blocked group's row: %q", got)
	}
	p.shot("groups")

	// Pausing webhooks through its button.
	p.open("/")
	p.click(`//tr[th/a[.="webhooks"]]//button[.="Pause"]`)
	p.want(".flash", "The queue is paused")
	if got := p.rowText("webhooks"); !strings.HasPrefix(got, "webhooks | paused |") || !strings.HasSuffix(got, "| Resume") {
		t.Errorf("after the pause the webhooks row reads %q", got)
	}
	if paused, err := runtime.PausedQueues(context.Background(), d.pool); err != nil || len(paused) != 1 || paused[0].Queue != "webhooks" {
		t.Errorf("paused queues %v (%v), want webhooks", paused, err)
	}
	p.open("/")
	p.shot("queues")
}
