package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/clock"
	"github.com/leasectl/leasectl/inspect"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
)

// maxBody bounds a request's body: it holds a command line of any
// realistic length; a larger body is refused (413) before it is read whole.
const maxBody = 1 << 20

// DefaultOpTimeout bounds a store call whose client gave no timeout: as
// long as an on-call command waits for a store across a WAN, short enough
// that a frozen store answers 503 rather than holding the request.
const DefaultOpTimeout = 15 * time.Second

// Config is what a Server serves and how.
type Config struct {
	// Store is the store the registry fronts; required. The Server does
	// not close it.
	Store *leasestore.Store
	// Namespace is the store's namespace: a request naming another one
	// (api.HeaderNamespace) is refused.
	Namespace string
	// Tokens are the bearer tokens accepted at first; SetTokens replaces
	// them. Required.
	Tokens *Tokens
	// Log receives one access-log line per request, and the registry's own
	// events. Bearer tokens never reach it.
	Log zerolog.Logger
	// ReaperMetrics, when not nil, are served at /metrics before the
	// registry's own (serve --reap-interval).
	ReaperMetrics *inspect.Metrics
	// RateLimit is how many requests a second one client address may make,
	// with bursts of twice as many; 0: no limit. A heartbeat refused by it
	// counts as a failed renewal, so set it above what one address's runs
	// need (their number / heartbeat, a few more for the rest).
	RateLimit float64
	// OpTimeout bounds each store call; 0: DefaultOpTimeout.
	OpTimeout time.Duration
	// SessionTTL is how long a login to the on-call page lasts; 0:
	// DefaultSessionTTL.
	SessionTTL time.Duration
	// Clock is the registry's time source, for its timestamps, long polls,
	// sweeps and sessions; nil: the system clock.
	Clock clock.Clock
}

// Server is the registry's HTTP handler and its state: tokens,
// subscriptions, token watches, remembered answers, rate limits and
// metrics.
type Server struct {
	cfg      Config
	tokens   atomic.Pointer[Tokens]
	handler  http.Handler
	hub      *hub
	watches  *tokenHub
	idem     *idempotency
	limits   *limiter
	metrics  *metrics
	ui       *ui
	draining chan struct{}
	drain    sync.Once
}

// New validates cfg and returns its Server.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("registry: no store")
	case cfg.Tokens == nil || cfg.Tokens.Len() == 0:
		return nil, errors.New("registry: no tokens")
	case cfg.RateLimit < 0:
		return nil, fmt.Errorf("registry: rate limit %g must not be negative", cfg.RateLimit)
	case cfg.OpTimeout < 0:
		return nil, fmt.Errorf("registry: op timeout %s must not be negative", cfg.OpTimeout)
	case cfg.SessionTTL < 0:
		return nil, fmt.Errorf("registry: session TTL %s must not be negative", cfg.SessionTTL)
	}
	if err := leasestore.ValidateNamespace(cfg.Namespace); err != nil {
		return nil, err
	}
	if cfg.OpTimeout == 0 {
		cfg.OpTimeout = DefaultOpTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	s := &Server{
		cfg:      cfg,
		hub:      newHub(cfg.Store, cfg.Clock),
		watches:  newTokenHub(cfg.Store, cfg.Clock, cfg.OpTimeout),
		idem:     newIdempotency(cfg.Clock.Now),
		limits:   newLimiter(cfg.RateLimit, cfg.Clock.Now),
		metrics:  newMetrics(),
		ui:       newUI(cfg.SessionTTL, cfg.Clock.Now),
		draining: make(chan struct{}),
	}
	s.tokens.Store(cfg.Tokens)
	s.handler = newInTime(cfg.Clock.Now, cfg.Log, s.mux())
	return s, nil
}

// SetTokens replaces the accepted tokens (a SIGHUP re-read the file).
// Requests in progress finish with the role they were given.
func (s *Server) SetTokens(t *Tokens) { s.tokens.Store(t) }

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Drain answers every long-poll in progress with shutting_down and makes
// /healthz fail, ahead of a shutdown; clients subscribe again elsewhere.
func (s *Server) Drain() {
	s.drain.Do(func() { close(s.draining) })
}

// Close drops every subscription and token watch, closing their store
// subscriptions and watches.
func (s *Server) Close() {
	s.hub.close()
	s.watches.close()
}

// sweepInterval is how often idle subscriptions and token watches are
// dropped.
const sweepInterval = 10 * time.Second

// sweep drops idle subscriptions and token watches until ctx is done.
func (s *Server) sweep(ctx context.Context) {
	t := s.cfg.Clock.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			s.hub.sweep()
			s.watches.sweep()
			s.ui.sessions.sweep()
		}
	}
}

// route is one operation of the registry.
type route struct {
	name   string // in logs and metrics, e.g. "acquire-job"
	method string
	path   string // a ServeMux path pattern
	role   Role   // the least role that may; 0: no token needed
	// replay: answers are remembered by Idempotency-Key and given again to
	// a retry. Not for acquire and heartbeat: a remembered grant or renewal
	// could be stale by the time a retry comes; the store's own
	// idempotency answers those afresh.
	replay bool
	handle func(s *Server, x *exchange) (int, any, error)
}

// routes are the registry's operations (docs/registry-openapi.yaml).
func routes() []route {
	return []route{
		{"acquire-job", http.MethodPost, api.PathAcquire, RoleWorker, false, (*Server).acquire},
		{"heartbeat", http.MethodPost, api.PathHeartbeat, RoleWorker, false, (*Server).heartbeat},
		{"complete-job", http.MethodPost, api.PathComplete, RoleWorker, true, (*Server).complete},
		{"release-job", http.MethodPost, api.PathRelease, RoleWorker, true, (*Server).release},
		{"record-late", http.MethodPost, api.PathRecordLate, RoleWorker, true, (*Server).recordLate},
		{"leave-queue", http.MethodPost, api.PathLeave, RoleWorker, false, (*Server).leave},
		{"job-status", http.MethodGet, api.PathStatus + "{job_id...}", RoleReader, false, (*Server).status},
		{"subscribe", http.MethodPost, api.PathSubscribe, RoleWorker, false, (*Server).subscribe},
		{"wait", http.MethodGet, api.PathSubscription + "{subscription_id}", RoleWorker, false, (*Server).wait},
		{"unsubscribe", http.MethodDelete, api.PathSubscription + "{subscription_id}", RoleWorker, false, (*Server).unsubscribe},
		{"scan", http.MethodPost, api.PathScan, RoleOperator, true, (*Server).scan},
		{"quarantine-job", http.MethodPost, api.PathQuarantine, RoleOperator, true, (*Server).quarantine},
		{"unquarantine-job", http.MethodPost, api.PathUnquarantine, RoleOperator, true, (*Server).unquarantine},
		{"quarantined-jobs", http.MethodGet, api.PathQuarantined, RoleReader, false, (*Server).quarantined},
		{"stop-job", http.MethodPost, api.PathStop, RoleOperator, true, (*Server).stop},
		{"jobs", http.MethodGet, api.PathJobs, RoleReader, false, (*Server).jobs},
		{"expect-job", http.MethodPost, api.PathExpect, RoleOperator, true, (*Server).expect},
		{"overdue-jobs", http.MethodGet, api.PathOverdue, RoleReader, false, (*Server).overdue},
		{"leases", http.MethodGet, api.PathLeases, RoleReader, false, (*Server).leases},
		{"put-notices", http.MethodPost, api.PathPutNotices, RoleWorker, true, (*Server).putNotices},
		{"claim-notices", http.MethodPost, api.PathClaimNotices, RoleOperator, false, (*Server).claimNotices},
		{"settle-notice", http.MethodPost, api.PathSettleNotice, RoleOperator, true, (*Server).settleNotice},
		{"notices", http.MethodGet, api.PathNotices, RoleReader, false, (*Server).notices},
		{"counts", http.MethodGet, api.PathCounts, RoleReader, false, (*Server).counts},
		{"check-token", http.MethodGet, api.PathCheckToken, RoleReader, false, (*Server).checkToken},
		{"watch-tokens", http.MethodPost, api.PathTokenWatches, RoleReader, false, (*Server).watchTokens},
		{"token-states", http.MethodGet, api.PathTokenWatch + "{watch_id}", RoleReader, false, (*Server).tokenStates},
		{"unwatch-tokens", http.MethodDelete, api.PathTokenWatch + "{watch_id}", RoleReader, false, (*Server).unwatchTokens},
		{"sync-tokens", http.MethodPost, api.PathTokenSync, RoleReader, false, (*Server).syncTokens},
		{"metrics", http.MethodGet, api.PathMetrics, RoleReader, false, (*Server).serveMetrics},
		{"healthz", http.MethodGet, api.PathHealth, 0, false, (*Server).health},
	}
}

// mux routes each operation by its method pattern (GET also answers HEAD).
// A known path asked with another method falls to the path's method-less
// pattern, which answers 405 with Allow; an unknown path answers 404; both
// in the registry's error shape.
func (s *Server) mux() http.Handler {
	mux := http.NewServeMux()
	allowed := map[string][]string{}
	var paths []string
	for _, rt := range routes() {
		if allowed[rt.path] == nil {
			paths = append(paths, rt.path)
		}
		allowed[rt.path] = append(allowed[rt.path], rt.method)
		mux.HandleFunc(rt.method+" "+rt.path, func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, rt) })
	}
	for _, path := range paths {
		allow := strings.Join(allowed[path], ", ")
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			s.serve(w, r, route{name: "method-not-allowed", handle: func(*Server, *exchange) (int, any, error) {
				return 0, nil, api.Errorf(api.CodeMethodNotAllowed, "%s is not allowed on %s (use %s)", r.Method, r.URL.Path, allow)
			}})
		})
	}
	s.uiRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.serve(w, r, route{name: "not-found", handle: func(*Server, *exchange) (int, any, error) {
			return 0, nil, api.Errorf(api.CodeNotFound, "no route %s (the API is under %s; see docs/registry-openapi.yaml)", r.URL.Path, api.Prefix)
		}})
	})
	return mux
}

// exchange is one request on its way through the registry.
type exchange struct {
	r      *http.Request
	w      http.ResponseWriter
	ctx    context.Context // bounded by the store call's timeout
	body   []byte
	role   Role
	digest [sha256.Size]byte // of the bearer token
	// For the access log.
	job, worker string
	token       int64
	reqID       string
	code        string // the error code answered, if any
}

// decode reads the request's JSON body into v, refusing unknown fields so
// that a misspelt one is named rather than ignored.
func (x *exchange) decode(v any) error {
	dec := json.NewDecoder(bytes.NewReader(x.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syntax *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.Is(err, io.EOF):
			return &api.FieldError{Field: "body", Reason: "the request has no JSON body"}
		case errors.As(err, &typ):
			return &api.FieldError{Field: typ.Field, Reason: fmt.Sprintf("want a %s, got a JSON %s", typ.Type, typ.Value)}
		case errors.As(err, &syntax):
			return &api.FieldError{Field: "body", Reason: fmt.Sprintf("not JSON at byte %d", syntax.Offset)}
		default:
			// json names an unknown field only in its message.
			if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
				return &api.FieldError{Field: strings.Trim(f, `"`), Reason: "no such field"}
			}
			return &api.FieldError{Field: "body", Reason: err.Error()}
		}
	}
	if dec.More() {
		return &api.FieldError{Field: "body", Reason: "more than one JSON value"}
	}
	return nil
}

// rawBody is an answer written as it is, not as JSON (metrics, health).
type rawBody struct {
	contentType string
	data        []byte
}

// statusWriter remembers the status and size of the answer, for the access
// log and the metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
	size   int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

// Unwrap lets an http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.size += n
	return n, err
}

// serve answers r with rt: rate limit, authentication and role, namespace,
// body, remembered answers, the operation, the answer, the access log.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, rt route) {
	start := s.cfg.Clock.Now()
	s.metrics.begin()
	sw := &statusWriter{ResponseWriter: w}
	x := &exchange{r: r, w: sw, reqID: requestID(r)}
	sw.Header().Set(api.HeaderRequestID, x.reqID)
	defer func() {
		d := s.cfg.Clock.Now().Sub(start)
		s.metrics.end(rt.name, sw.status, d)
		s.accessLog(x, rt, sw, d)
	}()

	status, body, err := s.admit(x, rt)
	var owner *idemEntry
	var key idemKey
	if err == nil && rt.replay {
		if k := r.Header.Get(api.HeaderIdempotencyKey); k != "" {
			key = idemKey{token: x.digest, key: k}
			var answer []byte
			owner, status, answer, err = s.idem.begin(r.Context(), key, rt.name, sha256.Sum256(x.body))
			if err == nil && owner == nil {
				sw.Header().Set("Content-Type", "application/json")
				sw.Header().Set("Idempotent-Replayed", "true")
				sw.WriteHeader(status)
				_, _ = sw.Write(answer)
				return
			}
		}
	}
	if err == nil {
		var cancel context.CancelFunc
		x.ctx, cancel = context.WithTimeout(r.Context(), s.opTimeout(r))
		status, body, err = rt.handle(s, x)
		cancel()
		if err == nil && rt.changesJob() {
			s.changed(x.job)
		}
	}
	answer := s.answer(x, status, body, err)
	if owner != nil {
		s.idem.finish(owner, key, sw.status, answer, sw.status < 500)
	}
}

// answer writes status and body, or err in the registry's error shape, and
// returns what it wrote.
func (s *Server) answer(x *exchange, status int, body any, err error) []byte {
	h := x.w.Header()
	h.Set("Cache-Control", "no-store")
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			err = &leasestore.UnavailableError{Op: x.r.URL.Path, Err: err}
		}
		e := api.FromError(err)
		if e.JobID == "" {
			e.JobID = x.job
		}
		x.code = e.Code
		switch e.Code {
		case api.CodeUnauthenticated:
			h.Set("WWW-Authenticate", `Bearer realm="leasectl"`)
		case api.CodeRateLimited, api.CodeStoreUnavailable, api.CodeShuttingDown, api.CodeTooManySubscriptions, api.CodeTooManyTokenWatches:
			h.Set("Retry-After", "1")
		}
		status, body = e.Status(), api.ErrorBody{Error: e}
	}
	if status == http.StatusNoContent {
		x.w.WriteHeader(status)
		return nil
	}
	if raw, ok := body.(rawBody); ok {
		h.Set("Content-Type", raw.contentType)
		x.w.WriteHeader(status)
		_, _ = x.w.Write(raw.data)
		return raw.data
	}
	b, merr := json.Marshal(body)
	if merr != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"encoding the answer failed"}}`)
	}
	b = append(b, '\n')
	h.Set("Content-Type", "application/json")
	x.w.WriteHeader(status)
	_, _ = x.w.Write(b)
	return b
}

// admit lets x in or refuses it: rate limit, token and role, namespace and
// body, in that order.
func (s *Server) admit(x *exchange, rt route) (int, any, error) {
	if s.limits.rate > 0 {
		if addr := clientAddr(x.r); !s.limits.allow(addr) {
			return 0, nil, api.Errorf(api.CodeRateLimited, "more than %g requests a second from %s", s.cfg.RateLimit, addr)
		}
	}
	if rt.role > 0 {
		bearer, ok := strings.CutPrefix(x.r.Header.Get("Authorization"), "Bearer ")
		role, digest, known := s.tokens.Load().lookup(strings.TrimSpace(bearer))
		if !ok || !known {
			if addr := clientAddr(x.r); !s.limits.allowFailure(addr) {
				return 0, nil, api.Errorf(api.CodeRateLimited, "too many failed authentications from %s", addr)
			}
			if !ok {
				return 0, nil, api.Errorf(api.CodeUnauthenticated, "no bearer token (send Authorization: Bearer TOKEN)")
			}
			return 0, nil, api.Errorf(api.CodeUnauthenticated, "the bearer token is not one of the registry's")
		}
		x.role, x.digest = role, digest
		if role < rt.role {
			return 0, nil, &api.Error{Code: api.CodeForbidden, Role: role.String(), RequiredRole: rt.role.String(),
				Message: fmt.Sprintf("role %s may not %s (it needs the %s role)", role, rt.name, rt.role)}
		}
	}
	if ns := x.r.Header.Get(api.HeaderNamespace); ns != "" && ns != s.cfg.Namespace {
		return 0, nil, &api.Error{Code: api.CodeNamespaceMismatch, Namespace: s.cfg.Namespace,
			Message: fmt.Sprintf("this registry serves namespace %q, not %q", s.cfg.Namespace, ns)}
	}
	if x.r.Method == http.MethodPost {
		body, err := io.ReadAll(http.MaxBytesReader(x.w, x.r.Body, maxBody))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			return 0, nil, api.Errorf(api.CodeRequestTooLarge, "the body is larger than %d bytes", maxBody)
		case err != nil:
			return 0, nil, &api.FieldError{Field: "body", Reason: "reading it failed: " + err.Error()}
		}
		x.body = body
	}
	if k := x.r.Header.Get(api.HeaderIdempotencyKey); len(k) > maxIdempotencyKeyLen {
		return 0, nil, &api.FieldError{Field: api.HeaderIdempotencyKey, Reason: fmt.Sprintf("longer than %d bytes", maxIdempotencyKeyLen)}
	}
	return 0, nil, nil
}

// opTimeout bounds a store call: by the client's own timeout, if it gave
// one, and by the registry's.
func (s *Server) opTimeout(r *http.Request) time.Duration {
	d := s.cfg.OpTimeout
	if ms, err := strconv.ParseInt(r.Header.Get(api.HeaderTimeout), 10, 64); err == nil && ms > 0 {
		d = min(d, api.Duration(ms))
	}
	return d
}

// accessLog writes one line for the request: debug for the frequent
// successes (heartbeats, long-polls, health and metrics), info for other
// answers, warn for refused credentials and rate limits, error for
// failures. Never the bearer token.
func (s *Server) accessLog(x *exchange, rt route, w *statusWriter, d time.Duration) {
	log := s.cfg.Log
	var ev *zerolog.Event
	switch {
	case w.status >= 500:
		ev = log.Error()
	case w.status == http.StatusUnauthorized || w.status == http.StatusForbidden || w.status == http.StatusTooManyRequests:
		ev = log.Warn()
	case w.status < 300 && (rt.name == "heartbeat" || rt.name == "wait" || rt.name == "token-states" || rt.name == "sync-tokens" ||
		rt.name == "healthz" || rt.name == "metrics"):
		ev = log.Debug()
	default:
		ev = log.Info()
	}
	if !ev.Enabled() {
		return
	}
	ev = ev.Str("method", x.r.Method).Str("route", rt.name).Int("status", w.status).Dur("duration", d).
		Int("bytes", w.size).Str("remote", x.r.RemoteAddr).Str("request_id", x.reqID)
	if x.role > 0 {
		ev = ev.Str("role", x.role.String())
	}
	if x.code != "" {
		ev = ev.Str("code", x.code)
	}
	if tls := x.r.TLS; tls != nil && len(tls.PeerCertificates) > 0 {
		ev = ev.Str("client_cert", tls.PeerCertificates[0].Subject.CommonName)
	}
	if x.job != "" {
		ev = ev.Str("job", x.job)
	}
	if x.worker != "" {
		ev = ev.Str("worker", x.worker)
	}
	if x.token != 0 {
		ev = ev.Int64("token", x.token)
	}
	ev.Msg("request")
}

// requestID is the client's X-Request-Id when it is a sane one, else a
// new one.
func requestID(r *http.Request) string {
	id := r.Header.Get(api.HeaderRequestID)
	if id == "" || len(id) > 64 || strings.ContainsFunc(id, func(c rune) bool { return c <= ' ' || c > '~' }) {
		return newID()
	}
	return id
}

// clientAddr is the address a request came from, without its port: the
// unit of rate limits.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
