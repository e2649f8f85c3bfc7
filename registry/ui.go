package registry

import (
	"compress/gzip"
	"embed"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/leasectl/leasectl/registry/api"
)

// uiFiles are the on-call page's script and style, in the binary: the
// page loads nothing from elsewhere.
//
//go:embed ui/static
var uiFiles embed.FS

// contentSecurityPolicy lets the page run only its own script and style,
// from its own origin, and talk only to its own origin: data shown on the
// page cannot become script even if an escape were missed.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// ui is the on-call page's state: sessions and the feed of the jobs'
// changes.
type ui struct {
	sessions *sessions
	feed     *uiFeed
	// reconcile is how often a page's stream reads the live leases again:
	// uiReconcileInterval, shorter in tests.
	reconcile time.Duration
	// maxJobs is how many of the jobs the store knows the jobs page lists
	// at most: api.MaxJobsListed, fewer in tests.
	maxJobs int
}

func newUI(ttl time.Duration, now func() time.Time) *ui {
	return &ui{sessions: newSessions(ttl, now), feed: newUIFeed(), reconcile: uiReconcileInterval, maxJobs: api.MaxJobsListed}
}

// uiRequest is one request to the on-call page.
type uiRequest struct {
	w    http.ResponseWriter
	r    *http.Request
	x    *exchange
	se   *session // nil before login
	role Role
}

// uiRoutes mounts the on-call page on mux. role is the least role that
// may see or do each; 0: no session needed.
func (s *Server) uiRoutes(mux *http.ServeMux) {
	for _, p := range []struct {
		pattern, name string
		role          Role
		handle        func(*Server, *uiRequest)
	}{
		{"GET /{$}", "ui-jobs", RoleReader, (*Server).jobsPage},
		{"GET /jobs/{job_id...}", "ui-job", RoleReader, (*Server).jobPage},
		{"GET /quarantine", "ui-quarantine", RoleReader, (*Server).quarantinePage},
		{"GET /events", "ui-events", RoleReader, (*Server).uiEvents},
		{"POST /actions/quarantine", "ui-quarantine-job", RoleOperator, (*Server).uiQuarantine},
		{"POST /actions/release", "ui-release-job", RoleOperator, (*Server).uiRelease},
		{"POST /actions/stop", "ui-stop-job", RoleOperator, (*Server).uiStop},
		{"GET /login", "ui-login-page", 0, (*Server).loginPage},
		{"POST /login", "ui-login", 0, (*Server).login},
		{"POST /logout", "ui-logout", RoleReader, (*Server).logout},
	} {
		mux.HandleFunc(p.pattern, func(w http.ResponseWriter, r *http.Request) { s.page(w, r, p.name, p.role, p.handle) })
	}
	static, _ := fs.Sub(uiFiles, "ui/static")
	files := http.StripPrefix("/static/", http.FileServerFS(static))
	mux.HandleFunc("GET /static/", func(w http.ResponseWriter, r *http.Request) {
		uiHeaders(w.Header())
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// uiHeaders are the headers of every answer of the page.
func uiHeaders(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin") // no-referrer would make a form's Origin "null"
}

// page answers one request of the on-call page: rate limit, session and
// role, the CSRF check of a POST, the handler, the access log. Without a
// session a page sends the browser to the login page; with too small a
// role, or without the CSRF token, it is refused (403).
func (s *Server) page(w http.ResponseWriter, r *http.Request, name string, role Role, handle func(*Server, *uiRequest)) {
	start := s.cfg.Clock.Now()
	s.metrics.begin()
	sw := &statusWriter{ResponseWriter: w}
	x := &exchange{r: r, w: sw, reqID: requestID(r)}
	rt := route{name: name}
	defer func() {
		d := s.cfg.Clock.Now().Sub(start)
		s.metrics.end(name, sw.status, d)
		s.accessLog(x, rt, sw, d)
	}()
	uiHeaders(sw.Header())
	sw.Header().Set("Cache-Control", "no-store")
	p := &uiRequest{w: sw, r: r, x: x}
	if !s.limits.allow(clientAddr(r)) {
		s.uiError(p, http.StatusTooManyRequests, "Too many requests from "+clientAddr(r)+"; wait a moment.")
		return
	}
	p.se, p.role = s.authenticate(r)
	x.role = p.role
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(sw, r.Body, maxBody)
		// ParseForm, not PostFormValue: the forms are URL-encoded, and
		// multipart parsing would link package mime/multipart.
		if err := r.ParseForm(); err != nil {
			s.uiError(p, http.StatusBadRequest, "The form could not be read: "+err.Error())
			return
		}
		if !sameOrigin(r, p.se) {
			s.uiError(p, http.StatusForbidden, "This form is stale or did not come from this page (no valid CSRF token); open the page again.")
			return
		}
	}
	switch {
	case role > 0 && p.se == nil && r.Method == http.MethodGet && name != "ui-events":
		http.Redirect(sw, r, "/login", http.StatusSeeOther)
		return
	case role > 0 && p.se == nil:
		s.uiError(p, http.StatusUnauthorized, "Your session ended; log in again.")
		return
	case p.role < role:
		s.uiError(p, http.StatusForbidden, "The "+p.role.String()+" role may not do this (it needs the "+role.String()+" role).")
		return
	}
	if p.se != nil {
		x.worker = p.se.name
	}
	handle(s, p)
}

// uiPage is what every page's layout shows.
type uiPage struct {
	title    string
	name     string // who is logged in
	role     string
	operator bool
	csrf     string // masked afresh for each page
	live     bool   // the page follows /events
}

// uiBody is a page's content.
type uiBody interface {
	title() string
	write(h *htmlWriter, v *uiPage)
}

// render writes body's page at status, gzipped when the browser takes it.
func (s *Server) render(p *uiRequest, status int, body uiBody) {
	v := &uiPage{title: body.title(), role: p.role.String(), operator: p.role >= RoleOperator}
	if p.se != nil {
		v.name, v.csrf = p.se.name, maskCSRF(p.se.csrf)
	}
	_, v.live = body.(interface{ live() })
	var h htmlWriter
	h.head(v)
	body.write(&h, v)
	h.foot()
	w := p.w.Header()
	w.Set("Content-Type", "text/html; charset=utf-8")
	w.Set("Vary", "Accept-Encoding")
	if !strings.Contains(p.r.Header.Get("Accept-Encoding"), "gzip") {
		p.w.WriteHeader(status)
		_, _ = p.w.Write(h.b.Bytes())
		return
	}
	// A page of a thousand jobs is a quarter of a megabyte of repetitive
	// markup, and on-call may be on a phone: compressed it is a tenth.
	w.Set("Content-Encoding", "gzip")
	p.w.WriteHeader(status)
	zw, _ := gzip.NewWriterLevel(p.w, gzip.BestSpeed)
	_, _ = zw.Write(h.b.Bytes())
	_ = zw.Close()
}

// errorPage is a refusal or a failure, in words.
type errorPage struct{ Message string }

func (errorPage) title() string { return "Error" }

// uiError answers with an error page saying msg.
func (s *Server) uiError(p *uiRequest, status int, msg string) {
	p.x.code = http.StatusText(status)
	s.render(p, status, errorPage{Message: msg})
}

// loginPage is the login form.
type loginPage struct {
	Error string
	Name  string
}

func (loginPage) title() string { return "Log in" }

func (s *Server) loginPage(p *uiRequest) {
	s.render(p, http.StatusOK, loginPage{})
}
