package httpstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/failover"
	"github.com/leasectl/leasectl/registry/api"
)

// Store is a leasestore.Driver reached through a registry.
type Store struct {
	registries *failover.Endpoints // base URLs: scheme, host and path prefix
	clocks     clocks              // the last clock reading of each registry
	display    string              // the registries' URL, for messages
	client     *http.Client
	transport  *http.Transport
	token      string
	namespace  string
	region     string
	// noRTT is set once the registry refused a heartbeat's round trip
	// (a registry older than it).
	noRTT atomic.Bool
	// noExpect is set once the registry refused an acquire's expectation
	// (a registry older than it).
	noExpect atomic.Bool
	// noWorkerID is set once the registry refused a subscription's waiter
	// (a registry older than waking waiters in turn).
	noWorkerID atomic.Bool
	// copied follows the runs whose acquire went to more than one
	// registry: a copy may still land.
	copied *failover.Copies
	// feedStarted is set by StartTokens, which the one Store that wraps
	// this driver calls once.
	feedStarted atomic.Bool
}

var _ leasestore.Driver = (*Store)(nil)

// AuthError is the registry's refusal of the caller's credentials (401)
// or of its role (403). A 401 reaches callers wrapped in a
// *leasestore.UnavailableError: the store could not be used, and a
// command exits 69 with a line naming the cause. A 403 reaches them as it
// is, and matches leasestore.ErrForbidden: the token works, its role may
// not do this.
type AuthError struct {
	Registry string
	// Status is 401 (authentication) or 403 (the role may not).
	Status int
	// Role and Required are the token's role and the least role the
	// operation needs (403 only).
	Role, Required string
	Message        string
	// NoToken is set when the caller had no token to send.
	NoToken bool
}

// Error names authentication or the role.
func (e *AuthError) Error() string {
	switch {
	case e.Status == http.StatusForbidden:
		return fmt.Sprintf("registry %s refused the request: the token's role %s may not do it (it needs the %s role)", e.Registry, e.Role, e.Required)
	case e.NoToken:
		return fmt.Sprintf("registry %s refused authentication: no bearer token (set %s)", e.Registry, EnvToken)
	default:
		return fmt.Sprintf("registry %s refused authentication: %s (check %s against the registry's tokens file)", e.Registry, e.Message, EnvToken)
	}
}

// Is reports whether target is leasestore.ErrForbidden, for a 403.
func (e *AuthError) Is(target error) bool {
	return target == leasestore.ErrForbidden && e.Status == http.StatusForbidden
}

// Close closes the idle connections to the registry; the token watches'
// polls end with their watches, which the portable Store closes first.
func (s *Store) Close() error {
	s.transport.CloseIdleConnections()
	return nil
}

// call is one request to the registry.
type call struct {
	op     string // for errors: "acquire"
	method string
	path   string // api.Path*, with any job or subscription ID escaped in it (escapeSegment)
	query  url.Values
	body   any
	// key, when not empty, is sent as the Idempotency-Key.
	key string
	// single sends the call to the preferred registry alone: a long-poll,
	// whose answer comes late by design, and which a registry holds for
	// its own subscription or token watch.
	single bool
	// copies, when set, counts the copies of the request sent.
	copies *atomic.Int32
}

// do sends c, bounded by ctx, and decodes a 2xx answer into out (nil: none).
// A refusal of the store comes back as its leasestore error; anything else
// that keeps the call from being answered is a *leasestore.UnavailableError.
// It goes to the registries as failover.Do sends it, or to the preferred one
// alone when c.single is set.
func (s *Store) do(ctx context.Context, c call, out any) error {
	var body []byte
	if c.body != nil {
		b, err := json.Marshal(c.body)
		if err != nil {
			return &leasestore.UnavailableError{Op: c.op, Err: err}
		}
		body = b
	}
	send := func(ctx context.Context, base string) (*reply, error) {
		if c.copies != nil {
			c.copies.Add(1)
		}
		return s.send(ctx, base, c, body)
	}
	var r *reply
	var err error
	if c.single {
		r, err = send(ctx, s.registries.Names()[s.registries.Order()[0]])
	} else {
		r, err = failover.Do(ctx, s.registries, send, tryElsewhere)
	}
	var busy *busyError
	if errors.As(err, &busy) {
		r, err = busy.reply, nil
	}
	if err != nil {
		return &leasestore.UnavailableError{Op: c.op, Err: fmt.Errorf("registry %s: %w", s.display, err)}
	}
	if r.status/100 == 2 {
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(r.data, out); err != nil {
			return &leasestore.UnavailableError{Op: c.op, Err: fmt.Errorf("registry %s: a %d answer that is not the API's: %w", s.display, r.status, err)}
		}
		return nil
	}
	return s.refusal(c.op, r.status, r.data)
}

// maxAnswer bounds an answer read from the registry: a listing of every
// live lease of a large fleet fits.
const maxAnswer = 256 << 20

// refusal turns a non-2xx answer into the store error it stands for.
func (s *Store) refusal(op string, status int, data []byte) error {
	var eb api.ErrorBody
	if err := json.Unmarshal(data, &eb); err != nil || eb.Error == nil || eb.Error.Code == "" {
		// Not the registry's error shape: a proxy in between, or no
		// registry at all.
		snippet := string(data)
		if len(snippet) > 200 {
			snippet = snippet[:200]
		}
		return &leasestore.UnavailableError{Op: op, Err: fmt.Errorf("registry %s answered %d %s: %q", s.display, status, http.StatusText(status), snippet)}
	}
	e := eb.Error
	switch e.Code {
	case api.CodeUnauthenticated:
		return &leasestore.UnavailableError{Op: op, Err: &AuthError{Registry: s.display, Status: http.StatusUnauthorized, Message: e.Message, NoToken: s.token == ""}}
	case api.CodeForbidden:
		return &AuthError{Registry: s.display, Status: http.StatusForbidden, Role: e.Role, Required: e.RequiredRole, Message: e.Message}
	case api.CodeNamespaceMismatch:
		return &leasestore.NamespaceError{Namespace: s.namespace, Reason: fmt.Sprintf("the registry %s serves namespace %q", s.display, e.Namespace)}
	case api.CodeInvalidRequest:
		return &leasestore.RequestError{Op: op, Field: e.Field, Reason: e.Message}
	}
	if err := e.StoreError(); err != nil {
		return err
	}
	return &leasestore.UnavailableError{Op: op, Err: fmt.Errorf("registry %s: %w", s.display, e)}
}

// escapeSegment escapes a job ID as the last segment of a path: a '/' in
// it must not separate segments, and a job ID of "." or ".." must not be
// taken for a relative path.
func escapeSegment(id string) string {
	if id == "." || id == ".." {
		return strings.ReplaceAll(id, ".", "%2E")
	}
	return url.PathEscape(id)
}

// randomKey is a fresh Idempotency-Key.
func randomKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Acquire grants the lease on req.Job; see leasestore.Store. The request
// names the store URL's region unless req names one. It carries an
// Idempotency-Key, so that the HTTP transport may send it again on a fresh
// connection; the store answers a repeated acquire by the holder with the
// same lease. A registry older than expectations refuses the unknown
// expect field without granting; Acquire then asks again without it, and
// leaves it out from then on, with the lease's ExpectDropped set.
func (s *Store) Acquire(ctx context.Context, req leasestore.AcquireRequest) (*leasestore.Lease, error) {
	if req.Region == "" {
		req.Region = s.region
	}
	dropped := req.Expect != nil && s.noExpect.Load()
	if dropped {
		req.Expect = nil
	}
	l, err := s.acquire(ctx, req)
	var re *leasestore.RequestError
	if req.Expect != nil && errors.As(err, &re) && re.Field == "expect" {
		s.noExpect.Store(true)
		req.Expect, dropped = nil, true
		l, err = s.acquire(ctx, req)
	}
	if err != nil {
		return nil, err
	}
	l.ExpectDropped = dropped
	return l, nil
}

// acquire sends one acquire request.
func (s *Store) acquire(ctx context.Context, req leasestore.AcquireRequest) (*leasestore.Lease, error) {
	var l api.Lease
	var copies atomic.Int32
	err := s.do(ctx, call{op: "acquire", method: http.MethodPost, path: api.PathAcquire, body: api.FromAcquireRequest(req),
		key: randomKey(), copies: &copies}, &l)
	if copies.Load() > 1 {
		s.copied.Acquired(ctx, req, err)
	}
	if err != nil {
		return nil, err
	}
	return l.ToStore(req), nil
}

// Renew extends l's lease and passes on its round trip (l.RTT); see
// leasestore.Store. It is bounded by ctx, and hedged over the registries
// like every request: the supervisor counts its safety window from before
// the call, whatever happens in it. A
// registry older than round trips refuses the unknown rtt_us field without
// renewing; Renew then sends the heartbeat again without it, and leaves it
// out from then on.
func (s *Store) Renew(ctx context.Context, l *leasestore.Lease) error {
	h := api.FromRenew(l)
	if s.noRTT.Load() {
		h.RTTUS = 0
	}
	var answer api.Heartbeat
	err := s.do(ctx, call{op: "renew", method: http.MethodPost, path: api.PathHeartbeat, body: h}, &answer)
	var re *leasestore.RequestError
	if h.RTTUS != 0 && errors.As(err, &re) && re.Field == "rtt_us" {
		s.noRTT.Store(true)
		h.RTTUS = 0
		err = s.do(ctx, call{op: "renew", method: http.MethodPost, path: api.PathHeartbeat, body: h}, &answer)
	}
	if err != nil {
		return err
	}
	l.Stop = answer.Stop.ToStore()
	return nil
}

// Release ends l with out; see leasestore.Store. Its Idempotency-Key is
// derived from the lease and the outcome, so a release sent again after
// its answer was lost gets that answer rather than ErrLeaseLost.
func (s *Store) Release(ctx context.Context, l *leasestore.Lease, out leasestore.Outcome) error {
	body := api.FromRelease(l, out)
	b, _ := json.Marshal(body)
	sum := sha256.Sum256(b)
	err := s.do(ctx, call{op: "release", method: http.MethodPost, path: api.PathRelease, body: body,
		key: "release-" + hex.EncodeToString(sum[:16])}, nil)
	if err == nil || errors.Is(err, leasestore.ErrLeaseLost) {
		s.copied.Released(ctx, l)
	}
	return err
}

// Scan runs the reaper's pass in the store; see leasestore.Store.
func (s *Store) Scan(ctx context.Context) ([]leasestore.Crash, error) {
	var r api.ScanResult
	if err := s.do(ctx, call{op: "scan", method: http.MethodPost, path: api.PathScan, body: struct{}{}, key: randomKey()}, &r); err != nil {
		return nil, err
	}
	crashes := make([]leasestore.Crash, 0, len(r.Crashes))
	for _, c := range r.Crashes {
		crashes = append(crashes, c.ToStore())
	}
	return crashes, nil
}

// Quarantined lists the quarantined jobs; see leasestore.Store.
func (s *Store) Quarantined(ctx context.Context) ([]leasestore.Quarantine, error) {
	var r api.QuarantinedJobs
	if err := s.do(ctx, call{op: "list quarantined", method: http.MethodGet, path: api.PathQuarantined}, &r); err != nil {
		return nil, err
	}
	var list []leasestore.Quarantine
	for _, q := range r.Jobs {
		list = append(list, q.ToStore())
	}
	return list, nil
}

// Quarantine puts job in quarantine; see leasestore.Store.
func (s *Store) Quarantine(ctx context.Context, job string, note leasestore.Note) error {
	return s.do(ctx, call{op: "quarantine", method: http.MethodPost, path: api.PathQuarantine,
		body: api.NoteRequest{JobID: job, By: note.By, Reason: note.Reason}, key: randomKey()}, nil)
}

// ReleaseQuarantine lets job run again; see leasestore.Store.
func (s *Store) ReleaseQuarantine(ctx context.Context, job string, note leasestore.Note) error {
	return s.do(ctx, call{op: "release quarantine", method: http.MethodPost, path: api.PathUnquarantine,
		body: api.NoteRequest{JobID: job, By: note.By, Reason: note.Reason}, key: randomKey()}, nil)
}

// Stop asks job's running child to stop; see leasestore.Store.
func (s *Store) Stop(ctx context.Context, job string, note leasestore.Note) error {
	return s.do(ctx, call{op: "stop", method: http.MethodPost, path: api.PathStop,
		body: api.NoteRequest{JobID: job, By: note.By, Reason: note.Reason}, key: randomKey()}, nil)
}

// Limits are leasestore.MaxSlots slots and every positive TTL: the
// registry refuses more slots, or a TTL, that the store behind it does not
// honour (invalid_request, exit 64), which this client cannot know before
// it asks; see leasestore.Driver.
func (s *Store) Limits() leasestore.Limits { return leasestore.Limits{MaxSlots: leasestore.MaxSlots} }

// Leave takes holder out of job's queue of waiters; see leasestore.Leaser.
func (s *Store) Leave(ctx context.Context, job, holder string) error {
	return s.do(ctx, call{op: "leave the queue", method: http.MethodPost, path: api.PathLeave,
		body: api.LeaveRequest{JobID: job, WorkerID: holder}}, nil)
}

// Jobs lists the known jobs whose IDs start with prefix; see
// leasestore.Store. The registry lists at most api.MaxJobsListed.
func (s *Store) Jobs(ctx context.Context, prefix string, limit int) ([]string, error) {
	q := url.Values{"prefix": {prefix}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(min(limit, api.MaxJobsListed)))
	}
	var r api.JobIDs
	if err := s.do(ctx, call{op: "list jobs", method: http.MethodGet, path: api.PathJobs, query: q}, &r); err != nil {
		return nil, err
	}
	return r.Jobs, nil
}

// Status reports job's state; see leasestore.Store.
func (s *Store) Status(ctx context.Context, job string) (*leasestore.JobStatus, error) {
	var st api.JobStatus
	if err := s.do(ctx, call{op: "status", method: http.MethodGet, path: api.PathStatus + escapeSegment(job)}, &st); err != nil {
		return nil, err
	}
	return st.ToStore(), nil
}

// Leases lists the live leases; see leasestore.Store.
func (s *Store) Leases(ctx context.Context) ([]leasestore.Holder, error) {
	var r api.Leases
	if err := s.do(ctx, call{op: "list leases", method: http.MethodGet, path: api.PathLeases}, &r); err != nil {
		return nil, err
	}
	var list []leasestore.Holder
	for _, h := range r.Leases {
		list = append(list, h.ToStore())
	}
	return list, nil
}

// Counts returns the store-wide gauges; see leasestore.Store.
func (s *Store) Counts(ctx context.Context) (leasestore.Counts, error) {
	var c api.Counts
	if err := s.do(ctx, call{op: "count", method: http.MethodGet, path: api.PathCounts}, &c); err != nil {
		return leasestore.Counts{}, err
	}
	return leasestore.Counts{InFlight: c.InFlight, Quarantined: c.Quarantined}, nil
}

// CheckToken checks token against job's current one; see leasestore.Store.
func (s *Store) CheckToken(ctx context.Context, job string, token int64) error {
	q := url.Values{"job_id": {job}, "fencing_token": {strconv.FormatInt(token, 10)}}
	return s.do(ctx, call{op: "check token", method: http.MethodGet, path: api.PathCheckToken, query: q}, nil)
}
