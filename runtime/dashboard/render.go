package dashboard

import (
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/dashboard.css
var css []byte

// pageNames are the pages; each is templates/<name>.html on the layout.
var pageNames = []string{"queues", "jobs", "job", "groups", "limits", "tenants", "batches", "batch", "workflows", "workflow"}

// parsePages parses each page with the layout. The templates are embedded,
// so a failure is a bug in this package: it panics.
func parsePages() map[string]*template.Template {
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html"))
	pages := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		pages[name] = template.Must(template.Must(layout.Clone()).ParseFS(templateFS, "templates/"+name+".html"))
	}
	return pages
}

func serveCSS(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Write(css) //nolint:errcheck // the client went away
}

var funcs = template.FuncMap{
	"num":    num,
	"ts":     timestamp,
	"ago":    ago,
	"dur":    duration,
	"period": period,
	"href":   href,
	"status": statusClass,
	"trim":   trim,
	"cell":   newCell,
	"sub":    func(a, b int) int { return a - b },
}

// cell is a count on the queues page that links to the jobs it counts.
type cell struct {
	Base, Queue, Status string
	Count               count
}

func newCell(base, queue, status string, c count) cell {
	return cell{Base: base, Queue: queue, Status: status, Count: c}
}

// count is a count that stops at a bound: "10,000+" when More.
type count struct {
	N    int64
	More bool // there may be more than N
}

// bounded is the count of n rows read with a bound: a count that read
// past the bound shows as the bound, with More.
func bounded(n, bound int64) count {
	if n > bound {
		return count{N: bound, More: true}
	}
	return count{N: n}
}

func (c count) String() string {
	if c.More {
		return num(c.N) + "+"
	}
	return num(c.N)
}

// Zero reports whether the count is exactly nothing.
func (c count) Zero() bool { return c.N == 0 && !c.More }

// num formats n with thousands separators.
func num(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// timestamp formats t in UTC to the second; "" for nil or zero.
func timestamp(t any) string {
	tm, ok := timeOf(t)
	if !ok {
		return ""
	}
	return tm.UTC().Format("2006-01-02 15:04:05 UTC")
}

// ago says how long before now t was ("3m 10s ago"), or how long after
// ("in 2h 5m").
func ago(t any, now time.Time) string {
	tm, ok := timeOf(t)
	if !ok {
		return ""
	}
	if d := now.Sub(tm); d >= 0 {
		return duration(d) + " ago"
	}
	return "in " + duration(tm.Sub(now))
}

func timeOf(t any) (time.Time, bool) {
	switch v := t.(type) {
	case time.Time:
		return v, !v.IsZero()
	case *time.Time:
		if v == nil {
			return time.Time{}, false
		}
		return *v, !v.IsZero()
	}
	return time.Time{}, false
}

// duration formats d with its two largest units: "450ms", "12s", "3m 10s",
// "2h 5m", "3d 4h".
func duration(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
}

// period is d as a rate's period is written (the rate form's N/PERIOD, and
// pgtask rates): Go's duration without its trailing zero units, so a
// minute is 1m, not 1m0s.
func period(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// href builds a link below base: path, then the query of the key and value
// pairs that follow, leaving out empty values.
func href(base, path string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	return base + path + querySuffix(q.Encode())
}

// statusClass is the CSS class of a status's badge.
func statusClass(s string) string {
	switch s {
	case "scheduled", "queued", "started", "succeeded", "failed", "cancelled":
		return "st-" + s
	}
	return "st-other"
}

// trim shortens s to n runes, on one line.
func trim(n int, s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// flash messages: an action redirects back with done=<code>, n=<number>
// and, for a sentence with two numbers, m=<number>, and the page shows the
// sentence. Only the code and numbers travel in the URL, so a link cannot
// make the page say anything else.
var flashes = map[string]string{
	"retried":            "Job #%d is back in line with a fresh set of attempts.",
	"not-retried":        "Job #%d was not retried: only failed and cancelled jobs can be.",
	"not-retried-unique": "Job #%d was not retried: job #%d holds its unique key now.",
	"cancelled":          "Job #%d is cancelled.",
	"not-cancelled":      "Job #%d was not cancelled: it has finished (a failure that does not block its group included).",
	"cancel-asked":       "Job #%d was running: its worker is asked to cancel the attempt, and the job ends cancelled unless the handler completes.",
	"retried-many":       "Retried %d jobs.",
	"retried-many-held":  "Retried %d jobs. %d others were not retried: other jobs hold their unique keys now (pgtask retry names them).",
	"cancelled-many":     "Cancelled %d jobs.",
	"paused":             "The queue is paused: no worker claims its jobs until it is resumed.",
	"was-paused":         "The queue was paused already.",
	"resumed":            "The queue is running again.",
	"was-running":        "The queue was not paused.",
	"limit-set":          "The limit is set, for every worker: %d limit keys changed now.",
	"limit-cleared":      "The operator's limit is cleared: %d limit keys changed now, back on the limit in force without it.",
	"rate-set":           "The rate is set, for every worker: %d rate keys changed now.",
	"rate-cleared":       "The operator's rate is cleared: %d rate keys changed now, back on the rate their tasks declare.",
	"weight-set":         "The tenant's weight is %d (it was %d), for its jobs enqueued from now on.",
}

func flashText(q url.Values) string {
	format, ok := flashes[q.Get("done")]
	if !ok {
		return ""
	}
	if !strings.Contains(format, "%d") {
		return format
	}
	n, err := strconv.ParseInt(q.Get("n"), 10, 64)
	if err != nil {
		return ""
	}
	if strings.Count(format, "%d") == 1 {
		return fmt.Sprintf(format, n)
	}
	m, err := strconv.ParseInt(q.Get("m"), 10, 64)
	if err != nil {
		return ""
	}
	return fmt.Sprintf(format, n, m)
}

func withoutFlash(q url.Values) url.Values {
	q.Del("done")
	q.Del("n")
	q.Del("m")
	return q
}
