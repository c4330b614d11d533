// Package dashboard serves pgtask's web dashboard: an http.Handler that
// shows the queues, the jobs, a job's history, the groups and the
// concurrency limits, and (unless it is read-only) retries, cancels, pauses
// and changes limits. Its pages are rendered on the server from embedded
// templates and read fine with JavaScript disabled.
//
// Mount it in a service:
//
//	mux.Handle("/pgtask/", dashboard.New(pool, dashboard.Options{
//		BasePath:     "/pgtask",
//		BasicAuth:    &dashboard.BasicAuth{User: "ops", Password: os.Getenv("PGTASK_UI_PASSWORD")},
//		AllowedHosts: []string{"ops.example.com"}, // the name it is reached by
//	}))
//
// or run `pgtask ui`, which serves it alone.
//
// Every page stays cheap however many jobs the table holds: each query
// walks an index for a bounded number of entries and none counts a whole
// status, so counts past 10,000 show as "10,000+" and the jobs page looks
// through at most 20,000 jobs per page, saying so when that bound stopped it.
//
// Actions are POSTs. Each form carries a token, an HMAC under a key made
// when New is called, which the POST must return (so another site cannot
// make a visitor's browser act); a POST whose Origin or Sec-Fetch-Site header
// says it came from another site is refused as well. Each action answers
// with a redirect back to the page it was taken from.
//
// A request addressed to another host than the dashboard's (by its Host
// header) is refused before anything else runs, so that a site whose name
// was made to resolve to the dashboard's address cannot read or act on it
// as its own; see Options.AllowedHosts.
package dashboard

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
)

// Options configures the dashboard. The zero value serves it read-write at
// the root, without authentication.
type Options struct {
	// BasePath is the path the handler is mounted at, such as
	// "/admin/pgtask"; empty for the root. Links and forms are built on it,
	// and the handler serves the paths below it itself: mount it at
	// BasePath+"/" without http.StripPrefix.
	BasePath string
	// ReadOnly hides the actions and refuses every POST with 403 Forbidden.
	ReadOnly bool
	// BasicAuth, when set, makes every request give this user and
	// password. Without it the dashboard has no authentication of its own:
	// mount it behind yours.
	BasicAuth *BasicAuth
	// Logger receives the actions taken (at Info) and the errors; nil means
	// slog.Default().
	Logger *slog.Logger
	// AllowedHosts are the names, besides the address it serves on, that
	// requests may be addressed to (their Host header): "jobs.example.com"
	// on any port, "jobs.example.com:8443" on that one, or "*" for any
	// name (when something in front checks it). Without them the dashboard
	// answers only to the IP address and port a request's connection came
	// in on, and, on a loopback address, to localhost and the other
	// loopback addresses on that port; a request to another host gets 421
	// Misdirected Request before anything else runs. This stops a page whose
	// name an attacker made resolve to the dashboard's address (a DNS
	// rebinding) from reading or acting on it as a same-origin page.
	AllowedHosts []string
}

// BasicAuth is the user and password HTTP basic authentication asks for.
type BasicAuth struct {
	User     string
	Password string
	// Realm names the protection space browsers show; default "pgtask".
	Realm string
}

// bounds are how much a page reads.
type bounds struct {
	// count is how far a count goes before it shows as "10,000+".
	count int64
	// scan is how many jobs the jobs page looks through per page.
	scan int32
	// page is how many rows a page lists.
	page int
}

var defaultBounds = bounds{count: 10_000, scan: 20_000, page: 50}

// csrfTTL is how long a page's forms can be submitted.
const csrfTTL = 12 * time.Hour

// handler is the dashboard.
type handler struct {
	db       runtime.DB
	q        *gen.Queries
	base     string
	readOnly bool
	bound    bounds
	log      *slog.Logger
	auth     *credentials
	csrf     *csrfKey
	hosts    hosts
	origin   *http.CrossOriginProtection
	pages    map[string]*template.Template
	mux      *http.ServeMux
}

// credentials holds the SHA-256 of the expected user and password, so that
// comparing them takes the same time whatever their length.
type credentials struct {
	user, password [sha256.Size]byte
	challenge      string
}

// New returns the dashboard over db, which is usually a *pgxpool.Pool (bulk
// actions then run each batch in a transaction of its own). It panics with
// the error of opts.Check when opts are invalid.
func New(db runtime.DB, opts Options) http.Handler {
	if err := opts.Check(); err != nil {
		panic("dashboard.New: " + err.Error())
	}
	h := &handler{
		db: db, q: gen.New(db), base: strings.TrimSuffix(opts.BasePath, "/"), readOnly: opts.ReadOnly, bound: defaultBounds,
		log:    cmp.Or(opts.Logger, slog.Default()),
		csrf:   newCSRFKey(),
		hosts:  newHosts(opts.AllowedHosts),
		origin: http.NewCrossOriginProtection(),
		pages:  parsePages(),
	}
	if a := opts.BasicAuth; a != nil {
		h.auth = &credentials{
			user: sha256.Sum256([]byte(a.User)), password: sha256.Sum256([]byte(a.Password)),
			challenge: fmt.Sprintf(`Basic realm=%q, charset="UTF-8"`, cmp.Or(a.Realm, "pgtask")),
		}
	}
	h.mux = h.routes()
	return h
}

// Check reports what is wrong with o, if anything: a BasePath that is not a
// clean absolute path (a trailing slash is fine), a BasicAuth without a
// user or a password, or an entry of AllowedHosts that is not a host.
func (o Options) Check() error {
	if base := strings.TrimSuffix(o.BasePath, "/"); base != "" {
		if !strings.HasPrefix(base, "/") || path.Clean(base) != base || strings.ContainsAny(base, "{}?#%\\ \t\n") {
			return fmt.Errorf("BasePath %q: want a clean absolute path such as /admin/pgtask", o.BasePath)
		}
	}
	if a := o.BasicAuth; a != nil && (a.User == "" || a.Password == "") {
		return errors.New("BasicAuth needs both a user and a password")
	}
	for _, a := range o.AllowedHosts {
		if err := checkAllowedHost(a); err != nil {
			return err
		}
	}
	return nil
}

func (h *handler) routes() *http.ServeMux {
	mux := http.NewServeMux()
	b := h.base
	mux.HandleFunc("GET "+b+"/{$}", h.queuesPage)
	mux.HandleFunc("GET "+b+"/jobs", h.jobsPage)
	mux.HandleFunc("GET "+b+"/jobs/{id}", h.jobPage)
	mux.HandleFunc("GET "+b+"/groups", h.groupsPage)
	mux.HandleFunc("GET "+b+"/limits", h.limitsPage)
	mux.HandleFunc("GET "+b+"/batches", h.batchesPage)
	mux.HandleFunc("GET "+b+"/batches/{id}", h.batchPage)
	mux.HandleFunc("GET "+b+"/workflows", h.workflowsPage)
	mux.HandleFunc("GET "+b+"/workflows/{id}", h.workflowPage)
	mux.HandleFunc("GET "+b+"/tenants", h.tenantsPage)
	mux.HandleFunc("GET "+b+"/static/dashboard.css", serveCSS)
	mux.HandleFunc("POST "+b+"/jobs/{id}/retry", h.retryJob)
	mux.HandleFunc("POST "+b+"/jobs/{id}/cancel", h.cancelJob)
	mux.HandleFunc("POST "+b+"/jobs/retry", h.retryMatching)
	mux.HandleFunc("POST "+b+"/jobs/cancel", h.cancelMatching)
	mux.HandleFunc("POST "+b+"/queues/pause", h.pauseQueue)
	mux.HandleFunc("POST "+b+"/queues/resume", h.resumeQueue)
	mux.HandleFunc("POST "+b+"/limits/set", h.setLimit)
	mux.HandleFunc("POST "+b+"/limits/clear", h.clearLimit)
	mux.HandleFunc("POST "+b+"/limits/rate/set", h.setRate)
	mux.HandleFunc("POST "+b+"/limits/rate/clear", h.clearRate)
	mux.HandleFunc("POST "+b+"/tenants/weight", h.setTenantWeight)
	if b != "" {
		mux.HandleFunc("GET "+b, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, b+"/", http.StatusMovedPermanently)
		})
	}
	return mux
}

// ServeHTTP refuses a request to another host, authenticates the request,
// guards POSTs, refuses text that is not UTF-8, and routes it.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Referrer-Policy", "same-origin")
	if !h.allowedHost(r) {
		refuseHost(w, r)
		return
	}
	if !h.authenticated(r) {
		hdr.Set("WWW-Authenticate", h.auth.challenge)
		http.Error(w, "401 Unauthorized: this dashboard needs a user and password", http.StatusUnauthorized)
		return
	}
	if r.Method == http.MethodPost {
		if err := h.checkPost(w, r); err != nil {
			http.Error(w, "403 Forbidden: "+err.Error(), http.StatusForbidden)
			return
		}
	}
	if err := checkText(r); err != nil {
		http.Error(w, "400 Bad Request: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := checkRefresh(r.URL.Query()); err != nil {
		http.Error(w, "400 Bad Request: "+err.Error(), http.StatusBadRequest)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// checkText refuses a query or form field that is not text the database
// can hold: not UTF-8, or with a NUL byte. Every name and value of the
// dashboard's is, so such a field is a bad link rather than a question to
// put to the database.
func checkText(r *http.Request) error {
	for _, fields := range []url.Values{r.URL.Query(), r.PostForm} {
		for name, values := range fields {
			if !validText(name) {
				return fmt.Errorf("a field's name, %q, is not valid UTF-8 text (or holds a NUL byte)", name)
			}
			for _, v := range values {
				if !validText(v) {
					return fmt.Errorf("the field %s, %q, is not valid UTF-8 text (or holds a NUL byte)", name, v)
				}
			}
		}
	}
	return nil
}

func validText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// authenticated reports whether r gives the configured user and password
// (always true without BasicAuth). Both are compared in constant time.
func (h *handler) authenticated(r *http.Request) bool {
	if h.auth == nil {
		return true
	}
	user, password, ok := r.BasicAuth()
	if !ok {
		return false
	}
	u, p := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	userOK := subtle.ConstantTimeCompare(u[:], h.auth.user[:])
	passwordOK := subtle.ConstantTimeCompare(p[:], h.auth.password[:])
	return userOK&passwordOK == 1
}

// errReadOnly is why a POST to a read-only dashboard is refused.
var errReadOnly = errors.New("the dashboard is read-only")

// checkPost refuses a POST to a read-only dashboard, one from another site,
// and one without the token of a form this dashboard rendered.
func (h *handler) checkPost(w http.ResponseWriter, r *http.Request) error {
	if h.readOnly {
		return errReadOnly
	}
	if err := h.origin.Check(r); err != nil {
		return fmt.Errorf("the request came from another site (%v)", err)
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		return fmt.Errorf("unreadable form: %v", err)
	}
	return h.csrf.check(r.PostForm.Get(csrfField), authUser(r), time.Now())
}

// authUser is the basic-auth user of r, which the form tokens are bound to.
func authUser(r *http.Request) string {
	user, _, _ := r.BasicAuth()
	return user
}

// render writes the named page, or a 500 if it fails to render.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	var buf bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&buf, "layout", data); err != nil {
		h.fail(w, r, fmt.Errorf("render %s: %w", name, err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(buf.Bytes()) //nolint:errcheck // the client went away
}

// fail logs err and answers 500 with it: the dashboard is an operator's
// tool, and the database's error is what they need to see.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	h.log.ErrorContext(r.Context(), "pgtask dashboard: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	http.Error(w, "500 Internal Server Error: "+err.Error(), http.StatusInternalServerError)
}

// page is what every page's template reads.
type page struct {
	Title    string
	Nav      string // which navigation link is current
	Base     string
	ReadOnly bool
	CSRF     string // the token forms carry
	Back     string // this page's path and query below Base, where actions return
	Flash    string // what the last action did
	Now      time.Time
	// CountBound and ScanBound are where counts and the jobs page stop.
	CountBound, ScanBound int64
	// Refresh is how often, in seconds, the page reloads itself (0: it
	// does not), and RefreshURL what it reloads: the page without the
	// flash. RefreshOn and RefreshOff link to the page reloading every
	// defaultRefresh seconds, and to it not reloading.
	Refresh                           int
	RefreshURL, RefreshOn, RefreshOff string
}

// Auto-refresh: the refresh query parameter reloads a page every so many
// seconds, through <meta http-equiv="refresh">, no script.
const (
	refreshParam   = "refresh"
	defaultRefresh = 10
	minRefresh     = 2
	maxRefresh     = 3600
)

// checkRefresh refuses a refresh parameter that is not a number of
// seconds from minRefresh to maxRefresh.
func checkRefresh(q url.Values) error {
	if !q.Has(refreshParam) {
		return nil
	}
	if n, err := strconv.Atoi(q.Get(refreshParam)); err != nil || n < minRefresh || n > maxRefresh {
		return fmt.Errorf("refresh %q: want how often to reload the page, in seconds from %d to %d, such as refresh=%d",
			q.Get(refreshParam), minRefresh, maxRefresh, defaultRefresh)
	}
	return nil
}

// RefreshEvery is how often, in seconds, the page's link to auto-refresh
// reloads it.
func (page) RefreshEvery() int { return defaultRefresh }

func (h *handler) page(r *http.Request, nav, title string) page {
	q := withoutFlash(r.URL.Query())
	p := page{
		Title: title, Nav: nav, Base: h.base, ReadOnly: h.readOnly,
		CSRF:  h.csrf.token(authUser(r), time.Now()),
		Back:  strings.TrimPrefix(r.URL.Path, h.base) + querySuffix(q.Encode()),
		Flash: flashText(r.URL.Query()),
		Now:   time.Now(), CountBound: h.bound.count, ScanBound: int64(h.bound.scan),
	}
	p.Refresh, _ = strconv.Atoi(q.Get(refreshParam)) // checked by ServeHTTP
	link := func(refresh int) string {
		v := url.Values{}
		for k, vs := range q {
			v[k] = vs
		}
		v.Del(refreshParam)
		if refresh > 0 {
			v.Set(refreshParam, strconv.Itoa(refresh))
		}
		u := url.URL{Path: r.URL.Path, RawQuery: v.Encode()}
		return u.String()
	}
	p.RefreshURL, p.RefreshOn, p.RefreshOff = link(p.Refresh), link(defaultRefresh), link(0)
	return p
}

func querySuffix(q string) string {
	if q == "" {
		return ""
	}
	return "?" + q
}
