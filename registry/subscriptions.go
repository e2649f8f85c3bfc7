package registry

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sync"
	"time"

	"github.com/leasectl/leasectl/clock"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
)

// Subscription bounds. A subscription nobody waits on is dropped after
// subscriptionIdle: long enough for a client between two long-polls, or
// riding out a short network failure, short enough that the subscriptions
// of clients that vanished go soon. maxSubscriptions bounds what one
// registry holds (each job waited on holds one store subscription: on Redis
// a connection, on etcd a watch stream, on PostgreSQL a LISTEN).
//
// maxSubscriptionsPerToken bounds what one bearer token holds, so that one
// token (leaked, or a runaway client) cannot take every subscription from
// the others. A fleet sharing one worker token shares it too: a waiter past
// it is refused with too_many_subscriptions (503) and asks again after a
// delay, as for a store that fails, until its --wait-timeout. Higher lets
// one token crowd out more; lower makes large fleets sharing a token poll.
const (
	subscriptionIdle         = 2 * api.MaxPollTimeoutMS * time.Millisecond
	maxSubscriptions         = 10_000
	maxSubscriptionsPerToken = 1_000
	// turnTimeout bounds the store read that says whose turn it is
	// (hub.wake): past it every waiter is woken, as before the read.
	turnTimeout = time.Second
)

// hub holds the registry's subscriptions. Waiters of one job share one
// store subscription; each of them keeps a pending release until it
// collects it with a wait, so that nothing released between two
// long-polls is missed.
type hub struct {
	store *leasestore.Store
	clock clock.Clock

	mu     sync.Mutex
	jobs   map[string]*jobWatch
	subs   map[string]*subscription
	held   admission // of subs
	made   uint64    // subscriptions made so far
	closed bool
}

// jobWatch is the store subscription of one job and its waiters.
type jobWatch struct {
	job     string
	ready   chan struct{} // closed once sub or err is set
	sub     leasestore.Subscription
	err     error
	waiters map[*subscription]struct{}
	stop    chan struct{}
	ended   bool // no waiter is left, or the store subscription failed
}

// subscription is one client's: its pending release (pending holds a
// value) and when it was last waited on.
type subscription struct {
	id      string
	job     string
	waiter  string // the worker it is for; "": not named
	w       *jobWatch
	owner   [sha256.Size]byte // the digest of the token that made it
	pending chan struct{}
	waiting int // waits in progress
	seen    time.Time
	seq     uint64 // the order it was made in, in the hub
}

// notify keeps a release for s, coalescing with one not yet collected.
func (s *subscription) notify() {
	select {
	case s.pending <- struct{}{}:
	default:
	}
}

func newHub(store *leasestore.Store, clk clock.Clock) *hub {
	held := newAdmission("subscriptions", api.CodeTooManySubscriptions,
		"wait on fewer jobs at once, or give clients tokens of their own", maxSubscriptions, maxSubscriptionsPerToken)
	return &hub{store: store, clock: clk, jobs: map[string]*jobWatch{}, subs: map[string]*subscription{}, held: held}
}

// subscribe makes a subscription to job for waiter ("": none named) and
// the token with digest owner. When it returns, the store subscription is
// in place: every release after this moment is kept for the subscription
// (or, for a waiter, every one in its turn: see wake).
func (h *hub) subscribe(ctx context.Context, job, waiter string, owner [sha256.Size]byte) (*subscription, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, api.Errorf(api.CodeShuttingDown, "the registry is shutting down")
	}
	if err := h.held.admit(owner, len(h.subs)); err != nil {
		h.mu.Unlock()
		return nil, err
	}
	w, ok := h.jobs[job]
	if !ok {
		w = &jobWatch{job: job, ready: make(chan struct{}), waiters: map[*subscription]struct{}{}, stop: make(chan struct{})}
		h.jobs[job] = w
	}
	h.made++
	s := &subscription{id: newID(), job: job, waiter: waiter, w: w, owner: owner, pending: make(chan struct{}, 1), seen: h.clock.Now(), seq: h.made}
	// Joined now, the subscription is notified by the store subscription
	// as soon as that is in place.
	w.waiters[s] = struct{}{}
	h.subs[s.id] = s
	h.mu.Unlock()

	if !ok {
		sub, err := h.store.Subscribe(ctx, job, "")
		h.mu.Lock()
		w.sub, w.err = sub, err
		close(w.ready)
		if err != nil {
			h.endLocked(w)
		}
		h.mu.Unlock()
		if err == nil {
			go h.forward(w)
		}
	}
	select {
	case <-w.ready:
	case <-ctx.Done():
		h.drop(s)
		return nil, &leasestore.UnavailableError{Op: "subscribe", Err: ctx.Err()}
	}
	if w.err != nil {
		h.drop(s)
		return nil, w.err
	}
	return s, nil
}

// forward passes w's store notifications to its waiters until w stops.
func (h *hub) forward(w *jobWatch) {
	for {
		select {
		case <-w.stop:
			return
		case <-w.sub.Released():
			h.wake(w)
		}
	}
}

// wake passes a notification of w's job to its subscriptions: at once to
// those that name no waiter and to the oldest that names one, whose waiter
// is most likely the first in the queue (a waiter subscribes before it
// joins it, and closes its subscription once granted). While two or more
// name their waiter, it then asks the store whose turn it is, and passes
// it to those too: the others could not be granted a slot, and their
// requests would only slow the first's (docs/semantics.md, Slots and the
// queue). When the store does not answer within turnTimeout, it passes it
// to every subscription.
func (h *hub) wake(w *jobWatch) {
	h.mu.Lock()
	var oldest *subscription
	named := 0
	for s := range w.waiters {
		if s.waiter == "" {
			s.notify()
			continue
		}
		named++
		if oldest == nil || s.seq < oldest.seq {
			oldest = s
		}
	}
	if oldest != nil {
		oldest.notify()
	}
	h.mu.Unlock()
	if named < 2 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), turnTimeout)
	st, err := h.store.Status(ctx, w.job)
	cancel()
	var turn []string
	if err == nil {
		turn = leasestore.Turn(st.Queue, max(st.Slots, 1)-len(st.Holders))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range w.waiters {
		if err != nil || slices.Contains(turn, s.waiter) {
			s.notify()
		}
	}
}

// get returns the subscription id of owner, or nil.
func (h *hub) get(id string, owner [sha256.Size]byte) *subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.subs[id]
	if s == nil || s.owner != owner {
		return nil
	}
	return s
}

// wait waits up to timeout for a release of s's job, or until draining
// closes or ctx ends. It reports whether there was a release.
func (h *hub) wait(ctx context.Context, s *subscription, timeout time.Duration, draining <-chan struct{}) (bool, error) {
	h.mu.Lock()
	s.waiting++
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		s.waiting--
		s.seen = h.clock.Now()
		h.mu.Unlock()
	}()
	t := h.clock.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-s.pending:
		return true, nil
	case <-t.C():
		return false, nil
	case <-draining:
		return false, api.Errorf(api.CodeShuttingDown, "the registry is shutting down; subscribe again")
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// drop ends s; the job's store subscription ends with its last waiter.
func (h *hub) drop(s *subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropLocked(s)
}

func (h *hub) dropLocked(s *subscription) {
	if h.subs[s.id] != s {
		return
	}
	delete(h.subs, s.id)
	h.held.release(s.owner)
	delete(s.w.waiters, s)
	if len(s.w.waiters) == 0 {
		h.endLocked(s.w)
	}
}

// endLocked takes w out of the hub, so that the job's next subscriber
// makes a new store subscription, and closes w's store subscription once
// it is in place.
func (h *hub) endLocked(w *jobWatch) {
	if w.ended {
		return
	}
	w.ended = true
	if h.jobs[w.job] == w {
		delete(h.jobs, w.job)
	}
	go func() {
		<-w.ready
		if w.sub != nil {
			close(w.stop)
			_ = w.sub.Close()
		}
	}()
}

// sweep drops the subscriptions nobody waited on for subscriptionIdle.
func (h *hub) sweep() {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clock.Now()
	for _, s := range h.subs {
		if s.waiting == 0 && now.Sub(s.seen) > subscriptionIdle {
			h.dropLocked(s)
		}
	}
}

// count is how many subscriptions there are.
func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// close drops every subscription and refuses new ones.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, s := range h.subs {
		h.dropLocked(s)
	}
}

// newID is a random subscription or request ID.
func newID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
