package leasestore

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrClosed is the cause of a call on a Store after its Close, in an
// *UnavailableError.
var ErrClosed = errors.New("the store is closed")

// ErrFeedStarted is a driver's refusal of a second StartTokens: a second
// Store wraps it, which no driver allows, as each Store starts and stops
// the driver's token source and closes the driver.
var ErrFeedStarted = errors.New("the driver's token feed is started already: another Store wraps the driver (wrap it once, with leasestore.New, or use leasestore.Open)")

// Store keeps leases, crash evidence, quarantine state and history for
// jobs: the portable type that callers hold, over the Driver of one store
// (Open picks it by URL, New wraps one). It implements Leaser, Operator
// and TokenFeed, and does for every driver what is not the backend's
// business: it refuses an invalid job ID (*InvalidJobIDError), a TTL or a
// number of slots outside the driver's Limits (*RequestError) and an
// invalid notice before any I/O, and any call after Close (ErrClosed,
// matching ErrUnavailable). Every method is safe for concurrent use.
type Store struct {
	d      Driver
	limits Limits
	calls  gate

	// hubMu guards hub, made by the first WatchTokens.
	hubMu sync.Mutex
	hub   *TokenHub
}

var (
	_ Leaser    = (*Store)(nil)
	_ Operator  = (*Store)(nil)
	_ TokenFeed = (*Store)(nil)
)

// New returns the portable Store over d, which no other Store may wrap:
// the Store starts d's token source and closes d (a driver refuses a
// second start of its source with ErrFeedStarted).
func New(d Driver) *Store {
	return &Store{d: d, limits: d.Limits(), calls: gate{drained: make(chan struct{}, 1)}}
}

// Driver returns the store's driver, for what only its store can do
// (PostgreSQL's schema migration), as Go CDK's As does.
func (s *Store) Driver() Driver { return s.d }

// Limits are the TTLs and slots the store honours; see Driver.
func (s *Store) Limits() Limits { return s.limits }

// Close refuses new calls, waits for those in flight to return (each is
// bounded by its ctx), stops the token watches and releases the store's
// connections and files; calls made after it fail with ErrClosed, and the
// driver runs none after its Close. Closing again does nothing. Close must
// not be called from within a call on the store (a watch's fn).
func (s *Store) Close() error {
	if !s.calls.close() {
		return nil
	}
	s.hubMu.Lock()
	h := s.hub
	s.hubMu.Unlock()
	if h != nil {
		h.Close()
	}
	return s.d.Close()
}

// enter admits a call of op, refused after Close; an admitted call leaves
// (s.calls.leave) when it returns.
func (s *Store) enter(op string) error {
	if !s.calls.enter() {
		return &UnavailableError{Op: op, Err: ErrClosed}
	}
	return nil
}

// run is the driver's answer f to op, unless the store is closed.
func (s *Store) run(op string, f func() error) error {
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.calls.leave()
	return f()
}

// runFor is run for a call about job, refusing an invalid job ID too.
func (s *Store) runFor(op, job string, f func() error) error {
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.calls.leave()
	if err := ValidateJobID(job); err != nil {
		return err
	}
	return f()
}

// answer is the driver's answer f to op, unless the store is closed.
func answer[T any](s *Store, op string, f func() (T, error)) (T, error) {
	if err := s.enter(op); err != nil {
		var zero T
		return zero, err
	}
	defer s.calls.leave()
	return f()
}

// answerFor is answer for a call about job, refusing an invalid job ID
// too.
func answerFor[T any](s *Store, op, job string, f func() (T, error)) (T, error) {
	if err := s.enter(op); err != nil {
		var zero T
		return zero, err
	}
	defer s.calls.leave()
	if err := ValidateJobID(job); err != nil {
		var zero T
		return zero, err
	}
	return f()
}

// checkRequest refuses a request the store cannot honour: a job ID, a TTL
// or a number of slots outside its Limits.
func (s *Store) checkRequest(req *AcquireRequest) error {
	if err := ValidateJobID(req.Job); err != nil {
		return err
	}
	var le *LimitError
	if !errors.As(s.limits.Check(req.TTL, req.Slots), &le) {
		return nil
	}
	field := "the slots"
	if le.TTLLimit() {
		field = "the TTL"
	}
	return &RequestError{Op: "acquire", Field: field, Reason: le.Error()}
}

// Acquire grants the lease on req.Job to req.Holder; see Leaser.
func (s *Store) Acquire(ctx context.Context, req AcquireRequest) (*Lease, error) {
	return answer(s, "acquire", func() (*Lease, error) {
		if err := s.checkRequest(&req); err != nil {
			return nil, err
		}
		return s.d.Acquire(ctx, req)
	})
}

// Renew extends the liveness of l; see Leaser.
func (s *Store) Renew(ctx context.Context, l *Lease) error {
	return s.runFor("renew", l.Job, func() error { return s.d.Renew(ctx, l) })
}

// Release ends l with outcome out; see Leaser.
func (s *Store) Release(ctx context.Context, l *Lease, out Outcome) error {
	return s.runFor("release", l.Job, func() error { return s.d.Release(ctx, l, out) })
}

// Subscribe starts delivering job's notifications to waiter; see Leaser.
func (s *Store) Subscribe(ctx context.Context, job, waiter string) (Subscription, error) {
	return answerFor(s, "subscribe", job, func() (Subscription, error) { return s.d.Subscribe(ctx, job, waiter) })
}

// RecordLate records the outcome of a run that did not reach the store in
// time; see Leaser.
func (s *Store) RecordLate(ctx context.Context, late LateOutcome) (Correction, error) {
	return answerFor(s, "record late outcome", late.Job, func() (Correction, error) { return s.d.RecordLate(ctx, late) })
}

// Leave takes holder out of job's queue of waiters; see Leaser.
func (s *Store) Leave(ctx context.Context, job, holder string) error {
	return s.runFor("leave", job, func() error { return s.d.Leave(ctx, job, holder) })
}

// NotesGroups reports whether the store's holders all share one host, so
// that it proves a run over once its supervisor and process group are
// gone (GroupNoter): only there does a waiter gain by watching its
// holder's supervisor exit.
func (s *Store) NotesGroups() bool {
	_, ok := s.d.(GroupNoter)
	return ok
}

// NoteGroup records that l's child runs in process group pgid, with this
// process as its supervisor, on a store whose holders all share one host
// (GroupNoter); on any other store it does nothing.
func (s *Store) NoteGroup(l *Lease, pgid int) error {
	gn, ok := s.d.(GroupNoter)
	if !ok {
		return nil
	}
	return s.runFor("note group", l.Job, func() error { return gn.NoteGroup(l, pgid) })
}

// Status reports job's state, holder, counters and history; see Operator.
func (s *Store) Status(ctx context.Context, job string) (*JobStatus, error) {
	return answerFor(s, "status", job, func() (*JobStatus, error) { return s.d.Status(ctx, job) })
}

// Scan counts the crashes whose evidence is there without liveness; see
// Operator.
func (s *Store) Scan(ctx context.Context) ([]Crash, error) {
	return answer(s, "scan", func() ([]Crash, error) { return s.d.Scan(ctx) })
}

// Quarantined lists the quarantined jobs; see Operator.
func (s *Store) Quarantined(ctx context.Context) ([]Quarantine, error) {
	return answer(s, "list quarantined", func() ([]Quarantine, error) { return s.d.Quarantined(ctx) })
}

// Quarantine puts job in quarantine by an operator's decision; see
// Operator.
func (s *Store) Quarantine(ctx context.Context, job string, note Note) error {
	return s.runFor("quarantine", job, func() error { return s.d.Quarantine(ctx, job, note) })
}

// ReleaseQuarantine lets job run again; see Operator.
func (s *Store) ReleaseQuarantine(ctx context.Context, job string, note Note) error {
	return s.runFor("release quarantine", job, func() error { return s.d.ReleaseQuarantine(ctx, job, note) })
}

// Stop asks the job's running child to stop; see Operator.
func (s *Store) Stop(ctx context.Context, job string, note Note) error {
	return s.runFor("stop", job, func() error { return s.d.Stop(ctx, job, note) })
}

// Jobs lists the IDs of the jobs the store knows that start with prefix;
// see Operator.
func (s *Store) Jobs(ctx context.Context, prefix string, limit int) ([]string, error) {
	if err := s.enter("jobs"); err != nil {
		return nil, err
	}
	defer s.calls.leave()
	if prefix != "" {
		if err := ValidateJobID(prefix); err != nil {
			return nil, err
		}
	}
	return s.d.Jobs(ctx, prefix, limit)
}

// Leases lists the live leases; see Operator.
func (s *Store) Leases(ctx context.Context) ([]Holder, error) {
	return answer(s, "leases", func() ([]Holder, error) { return s.d.Leases(ctx) })
}

// Counts returns store-wide gauges; see Operator.
func (s *Store) Counts(ctx context.Context) (Counts, error) {
	return answer(s, "counts", func() (Counts, error) { return s.d.Counts(ctx) })
}

// CheckToken returns nil when token is job's current fencing token and its
// lease is live; see Operator.
func (s *Store) CheckToken(ctx context.Context, job string, token int64) error {
	return s.runFor("check token", job, func() error { return s.d.CheckToken(ctx, job, token) })
}

// Expect sets or clears job's expectation; see Operator.
func (s *Store) Expect(ctx context.Context, job string, x *Expectation, note Note) error {
	return s.runFor("expect", job, func() error {
		if x != nil {
			if err := x.Validate(); err != nil {
				return err
			}
		}
		return s.d.Expect(ctx, job, x, note)
	})
}

// Overdue lists the jobs past their expectation; see Operator.
func (s *Store) Overdue(ctx context.Context) ([]Overdue, error) {
	return answer(s, "overdue", func() ([]Overdue, error) { return s.d.Overdue(ctx) })
}

// PutNotices records notices not yet kept; see Notices.
func (s *Store) PutNotices(ctx context.Context, notices []Notice) error {
	return s.run("put notices", func() error {
		for i := range notices {
			if err := notices[i].Validate(); err != nil {
				return err
			}
		}
		return s.d.PutNotices(ctx, notices)
	})
}

// ClaimNotices claims notices due for delivery for owner; see Notices.
func (s *Store) ClaimNotices(ctx context.Context, owner string, limit int, hold time.Duration) ([]Notice, error) {
	return answer(s, "claim notices", func() ([]Notice, error) { return s.d.ClaimNotices(ctx, owner, limit, hold) })
}

// SettleNotice ends owner's claim on the notice with key; see Notices.
func (s *Store) SettleNotice(ctx context.Context, key, owner string, st Settlement) error {
	return s.run("settle notice", func() error { return s.d.SettleNotice(ctx, key, owner, st) })
}

// ListNotices returns the notices the store keeps; see Notices.
func (s *Store) ListNotices(ctx context.Context) ([]Notice, error) {
	return answer(s, "list notices", func() ([]Notice, error) { return s.d.ListNotices(ctx) })
}

// WatchTokens starts following job's fencing state; see TokenFeed. The
// first watch starts the driver's side of the feed, which all the store's
// watches share.
func (s *Store) WatchTokens(ctx context.Context, job string, fn func(TokenState)) (TokenWatch, error) {
	return answerFor(s, "watch tokens", job, func() (TokenWatch, error) {
		h, err := s.tokenHub(ctx)
		if err != nil {
			return nil, err
		}
		return h.Watch(ctx, job, fn)
	})
}

// tokenHub returns the store's hub, starting the driver's source on first
// use.
func (s *Store) tokenHub(ctx context.Context) (*TokenHub, error) {
	s.hubMu.Lock()
	defer s.hubMu.Unlock()
	if s.hub == nil {
		h := newTokenHub()
		src, err := s.d.StartTokens(ctx, h)
		if err != nil {
			return nil, asUnavailable("watch tokens", err)
		}
		h.attach(src)
		s.hub = h
	}
	return s.hub, nil
}

// SyncTokens is the token feed's heartbeat; see TokenFeed. With no watch
// started there is nothing to wait for.
func (s *Store) SyncTokens(ctx context.Context) error {
	return s.run("sync tokens", func() error {
		s.hubMu.Lock()
		h := s.hub
		s.hubMu.Unlock()
		if h == nil {
			return nil
		}
		return h.Sync(ctx)
	})
}
