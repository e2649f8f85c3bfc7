package registry

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
)

// DefaultSessionTTL is how long a login to the on-call page lasts: an
// on-call shift. Longer sessions leave a forgotten browser signed in for
// longer; shorter ones make on-call log in again in the middle of an
// incident.
const DefaultSessionTTL = 12 * time.Hour

// sessionCookie is the name of the on-call page's session cookie.
const sessionCookie = "leasectl_session"

// maxSessions bounds the sessions kept at once; past it the expired ones
// are swept, then others end, in no particular order.
// Only a valid token starts one, so the bound is against a script that
// logs in in a loop, not against strangers.
const maxSessions = 10000

// session is one login to the on-call page. Its role is not kept: it is
// looked up by the token's digest on every request, so a token removed
// from the tokens file (SIGHUP) ends its sessions at once.
type session struct {
	id      string
	csrf    string
	digest  [sha256.Size]byte
	name    string // who logged in, for the history of their actions
	expires time.Time
}

// sessions are the on-call page's logins, in memory: a restart of the
// registry logs everyone out.
type sessions struct {
	mu  sync.Mutex
	m   map[string]*session
	ttl time.Duration
	now func() time.Time
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{m: map[string]*session{}, ttl: ttl, now: now}
}

// start makes a session for the holder of the token with digest d.
func (ss *sessions) start(d [sha256.Size]byte, name string) *session {
	se := &session{id: randomKey(), csrf: randomKey(), digest: d, name: name, expires: ss.now().Add(ss.ttl)}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.m) >= maxSessions {
		ss.sweepLocked()
	}
	for id := range ss.m {
		if len(ss.m) < maxSessions {
			break
		}
		delete(ss.m, id)
	}
	ss.m[se.id] = se
	return se
}

// get returns the live session id names, or nil.
func (ss *sessions) get(id string) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	se := ss.m[id]
	if se == nil {
		return nil
	}
	if !ss.now().Before(se.expires) {
		delete(ss.m, id)
		return nil
	}
	return se
}

// end ends the session id names.
func (ss *sessions) end(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, id)
}

// sweep drops expired sessions.
func (ss *sessions) sweep() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.sweepLocked()
}

func (ss *sessions) sweepLocked() {
	now := ss.now()
	for id, se := range ss.m {
		if !now.Before(se.expires) {
			delete(ss.m, id)
		}
	}
}

// randomKey is 256 random bits, URL-safe: a session ID or a CSRF token.
func randomKey() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// validName reports whether name can stand for a person in a job's
// history: printable, not blank, no longer than a worker ID.
func validName(name string) bool {
	return strings.TrimSpace(name) != "" && name != leasestore.ByLeasectl && len(name) <= api.MaxWorkerIDLen &&
		!strings.ContainsFunc(name, unicode.IsControl)
}

// login starts a session from the form's token and name, or shows the
// login page again saying why not.
func (s *Server) login(p *uiRequest) {
	token, name := p.r.PostForm.Get("token"), strings.TrimSpace(p.r.PostForm.Get("name"))
	addr := clientAddr(p.r)
	role, digest, known := s.tokens.Load().lookup(strings.TrimSpace(token))
	switch {
	case !validName(name):
		s.render(p, http.StatusBadRequest, loginPage{Error: "Give your name (up to 200 printable characters): your actions are recorded under it.", Name: name})
		return
	case !known && !s.limits.allowFailure(addr):
		s.render(p, http.StatusTooManyRequests, loginPage{Error: "Too many failed logins from " + addr + "; wait a minute.", Name: name})
		return
	case !known:
		s.render(p, http.StatusUnauthorized, loginPage{Error: "That token is not one of the registry's.", Name: name})
		return
	}
	se := s.ui.sessions.start(digest, name)
	p.x.role = role
	http.SetCookie(p.w, &http.Cookie{
		Name: sessionCookie, Value: se.id, Path: "/", MaxAge: int(s.ui.sessions.ttl / time.Second),
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(p.w, p.r, "/", http.StatusSeeOther)
}

// logout ends the request's session and forgets its cookie.
func (s *Server) logout(p *uiRequest) {
	s.ui.sessions.end(p.se.id)
	http.SetCookie(p.w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(p.w, p.r, "/login", http.StatusSeeOther)
}

// authenticate finds the request's session and its role; nil when there
// is none, it expired, or its token is no longer accepted.
func (s *Server) authenticate(r *http.Request) (*session, Role) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil, 0
	}
	se := s.ui.sessions.get(c.Value)
	if se == nil {
		return nil, 0
	}
	role := s.tokens.Load().roleOf(se.digest)
	if role == 0 {
		s.ui.sessions.end(se.id)
		return nil, 0
	}
	return se, role
}

// sameOrigin reports whether a state-changing request may go on: it names
// no origin but the page's own (when the browser names one) and, with a
// session, carries the session's CSRF token.
func sameOrigin(r *http.Request, se *session) bool {
	if o := r.Header.Get("Origin"); o != "" && o != "https://"+r.Host && o != "http://"+r.Host {
		return false
	}
	if se == nil {
		return true
	}
	want, _ := base64.RawURLEncoding.DecodeString(se.csrf)
	return subtle.ConstantTimeCompare(unmaskCSRF(r.PostForm.Get("csrf")), want) == 1
}

// maskCSRF is the session's CSRF token under a fresh one-time pad (the pad,
// then the token XOR the pad), so that no two pages carry the same bytes:
// the size of a compressed page then says nothing about the token to
// someone who can put text of theirs on it (BREACH).
func maskCSRF(token string) string {
	raw, _ := base64.RawURLEncoding.DecodeString(token)
	out := make([]byte, 2*len(raw))
	_, _ = rand.Read(out[:len(raw)])
	subtle.XORBytes(out[len(raw):], raw, out[:len(raw)])
	return base64.RawURLEncoding.EncodeToString(out)
}

// unmaskCSRF undoes maskCSRF; nil for what maskCSRF cannot have made.
func unmaskCSRF(masked string) []byte {
	b, err := base64.RawURLEncoding.DecodeString(masked)
	if err != nil || len(b) == 0 || len(b)%2 != 0 {
		return nil
	}
	n := len(b) / 2
	out := make([]byte, n)
	subtle.XORBytes(out, b[:n], b[n:])
	return out
}
