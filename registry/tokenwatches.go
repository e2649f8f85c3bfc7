package registry

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/leasectl/leasectl/clock"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
)

// Token watch bounds, as for subscriptions. A watch nobody polls is dropped
// after tokenWatchIdle, and maxTokenWatches bounds what one registry holds:
// each is a watch in the store's feed, on Redis a channel of its one
// pub/sub connection, on the embedded store a watched file, on etcd a watch
// stream from the registry to etcd (and a read of the job's record on
// every heartbeat), on PostgreSQL a job filtered from its one LISTEN.
//
// maxTokenWatchesPerToken bounds what one bearer token holds, so that one
// reader token (the least role, handed out most widely) cannot take every
// watch, and load etcd with thousands of streams, alone. A checker following
// more jobs with one token gets too_many_token_watches (503) for the rest,
// which it checks against the store instead (write-through falls back by
// itself): higher lets one token crowd out more, lower makes large
// checkers ask the store more. Give large checkers tokens of their own.
//
// maxTokenStates bounds the states a watch keeps for a client that does not
// collect them. A job changes twice a run (a grant, an end), and a client
// polls again as soon as it has an answer, so a watch holds one or two
// states; one that reaches the bound is a client that stopped polling or
// cannot keep up. Its states are dropped and it is told it fell behind, and
// it starts over with a fresh read: fewer states costs such a client a new
// watch sooner, more costs memory (a few dozen bytes a state, for every
// watch).
const (
	tokenWatchIdle          = subscriptionIdle
	maxTokenWatches         = 10_000
	maxTokenWatchesPerToken = 1_000
	maxTokenStates          = 64
)

// tokenHub holds the registry's token watches: each is one watch in the
// token feed of the registry's store, whose states it keeps, numbered,
// until its client acknowledges them with its next poll. Unlike
// subscriptions, watches of one job are not shared: each client's first
// state must be a read made for it after its watch started, which only a
// watch of its own gives.
type tokenHub struct {
	store     *leasestore.Store
	clock     clock.Clock
	maxStates int

	mu      sync.Mutex
	watches map[string]*tokenWatch
	held    admission // of watches
	closed  bool

	// The store heartbeat the sync requests share (heartbeat).
	hbCtx     context.Context // ended by close
	hbStop    context.CancelFunc
	hbTimeout time.Duration // bounds one store heartbeat
	hbMu      sync.Mutex
	hbRunning *storeHeartbeat // in flight, or nil
	hbNext    *storeHeartbeat // to start once hbRunning ends, or nil
}

// storeHeartbeat is one call of the store feed's SyncTokens, shared by the
// sync requests that wait for it.
type storeHeartbeat struct {
	done chan struct{} // closed once err is set
	err  error
}

// tokenWatch is one client's watch of one job. Its fn (add) runs in the
// store's feed goroutine and takes only mu.
type tokenWatch struct {
	id    string
	job   string
	owner [sha256.Size]byte // the digest of the token that made it
	max   int

	mu      sync.Mutex
	states  []api.TokenState // not yet acknowledged, oldest first
	last    int64            // the seq of the newest state
	prev    api.TokenState   // the newest state
	acked   int64            // states up to it were acknowledged and dropped
	behind  bool             // states were dropped unacknowledged: the client must start over
	changed chan struct{}    // closed and replaced when a state is added or the watch ends
	gone    bool             // dropped from the hub
	waiting int              // polls in progress
	seen    time.Time        // when a poll last ended
	sw      leasestore.TokenWatch
	stopped bool // the store's watch is closed, or is to be once WatchTokens returns
}

// newTokenHub returns the token watches of store. opTimeout bounds each
// store heartbeat: shared by many requests, it runs under a context of the
// hub's own (ended by close), not any one request's.
func newTokenHub(store *leasestore.Store, clk clock.Clock, opTimeout time.Duration) *tokenHub {
	ctx, stop := context.WithCancel(context.Background())
	held := newAdmission("token watches", api.CodeTooManyTokenWatches,
		"check the other jobs with check-token, or give the checker a token of its own", maxTokenWatches, maxTokenWatchesPerToken)
	return &tokenHub{store: store, clock: clk, maxStates: maxTokenStates, watches: map[string]*tokenWatch{}, held: held,
		hbCtx: ctx, hbStop: stop, hbTimeout: opTimeout}
}

// watch starts a watch of job for the token with digest owner. When it
// returns, the store's watch is in place and has reported its first state,
// a read, which the returned states hold.
func (h *tokenHub) watch(ctx context.Context, job string, owner [sha256.Size]byte) (*tokenWatch, []api.TokenState, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, nil, api.Errorf(api.CodeShuttingDown, "the registry is shutting down")
	}
	if err := h.held.admit(owner, len(h.watches)); err != nil {
		h.mu.Unlock()
		return nil, nil, err
	}
	w := &tokenWatch{id: newID(), job: job, owner: owner, max: h.maxStates, changed: make(chan struct{}), seen: h.clock.Now()}
	h.watches[w.id] = w
	h.mu.Unlock()

	sw, err := h.store.WatchTokens(ctx, job, w.add)
	if err != nil {
		h.drop(w)
		return nil, nil, err
	}
	w.mu.Lock()
	w.sw = sw
	stopped := w.stopped
	states := append([]api.TokenState(nil), w.states...)
	w.mu.Unlock()
	if stopped {
		// Dropped (the hub closed) or fallen behind while it started.
		_ = sw.Close()
		h.drop(w)
		return nil, nil, api.Errorf(api.CodeShuttingDown, "the token watch ended as it started; watch again")
	}
	return w, states, nil
}

// add is the store watch's fn: it numbers st and keeps it for the client,
// leaving out a heartbeat's read that repeats the state before it (the
// embedded store reads every watched job on each heartbeat). A client that
// let maxStates pile up falls behind: its states are dropped, and its
// store watch closed.
func (w *tokenWatch) add(st leasestore.TokenState) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.behind || w.gone {
		return
	}
	a := api.FromTokenState(w.last+1, st)
	if a.Read && w.last > 0 && !w.prev.Lost && a.FencingToken == w.prev.FencingToken && a.Live == w.prev.Live {
		return
	}
	if len(w.states) >= w.max {
		w.behind, w.states = true, nil
		w.wake()
		// fn must not close its own watch: close it from elsewhere.
		go w.stop()
		return
	}
	w.last, w.prev = a.Seq, a
	w.states = append(w.states, a)
	w.wake()
}

// wake tells the polls waiting on w that something changed; w.mu is held.
func (w *tokenWatch) wake() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// stop closes w's store watch, now or, while WatchTokens has not returned
// it yet, as soon as it does.
func (w *tokenWatch) stop() {
	w.mu.Lock()
	sw := w.sw
	already := w.stopped
	w.stopped = true
	w.mu.Unlock()
	if sw != nil && !already {
		_ = sw.Close()
	}
}

// get returns the watch id of owner, or nil.
func (h *tokenHub) get(id string, owner [sha256.Size]byte) *tokenWatch {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.watches[id]
	if w == nil || w.owner != owner {
		return nil
	}
	return w
}

// errGone is the answer for a watch the registry no longer holds.
func errGone(id string) error {
	return api.Errorf(api.CodeTokenWatchNotFound,
		"no token watch %q for this token: it expired, the registry restarted, or it is another token's; watch again", id)
}

// poll acknowledges the states up to after, and returns those after it:
// at once if there are some, else as soon as one comes, or none once
// timeout passed. It fails when the client fell behind (the watch is then
// dropped), when the watch ends, when draining closes or ctx ends.
func (h *tokenHub) poll(ctx context.Context, w *tokenWatch, after int64, timeout time.Duration, draining <-chan struct{}) ([]api.TokenState, error) {
	w.mu.Lock()
	w.waiting++
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.waiting--
		w.seen = h.clock.Now()
		w.mu.Unlock()
	}()
	var t <-chan time.Time
	for {
		w.mu.Lock()
		switch {
		case w.gone:
			w.mu.Unlock()
			return nil, errGone(w.id)
		case after > w.last:
			w.mu.Unlock()
			return nil, &api.FieldError{Field: "after", Reason: fmt.Sprintf("the watch has no state %d yet (its newest is %d)", after, w.last)}
		case w.behind || after < w.acked:
			w.mu.Unlock()
			h.drop(w)
			return nil, api.Errorf(api.CodeTokenWatchBehind,
				"the token watch of job %q fell behind: states after %d were dropped before they were collected; watch again and read the job afresh", w.job, after)
		}
		i := 0
		for i < len(w.states) && w.states[i].Seq <= after {
			i++
		}
		w.states, w.acked = w.states[i:], after
		if len(w.states) > 0 {
			out := append([]api.TokenState(nil), w.states...)
			w.mu.Unlock()
			return out, nil
		}
		changed := w.changed
		w.mu.Unlock()
		if t == nil {
			timer := h.clock.NewTimer(timeout)
			defer timer.Stop()
			t = timer.C()
		}
		select {
		case <-changed:
		case <-t:
			return []api.TokenState{}, nil
		case <-draining:
			return nil, api.Errorf(api.CodeShuttingDown, "the registry is shutting down; watch again")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// sync waits for a store feed heartbeat that began after the call (shared
// with concurrent callers: heartbeat), then returns the seq each of ids
// (of owner) has reached: every change published before the call is
// numbered at or below it. Watches it does not hold, or holds fallen
// behind, are missing.
func (h *tokenHub) sync(ctx context.Context, ids []string, owner [sha256.Size]byte) (api.TokenSync, error) {
	if err := h.heartbeat(ctx, h.store); err != nil {
		return api.TokenSync{}, err
	}
	out := api.TokenSync{Watches: make([]api.TokenWatchSeq, 0, len(ids)), Missing: []string{}}
	for _, id := range ids {
		w := h.get(id, owner)
		if w == nil {
			out.Missing = append(out.Missing, id)
			continue
		}
		w.mu.Lock()
		seq, lost := w.last, w.behind || w.gone
		w.mu.Unlock()
		if lost {
			out.Missing = append(out.Missing, id)
			continue
		}
		out.Watches = append(out.Watches, api.TokenWatchSeq{WatchID: id, Seq: seq})
	}
	return out, nil
}

// heartbeat returns once a store heartbeat that started after the call
// ended, with its error: every change published before the call then
// reached the watches' fn, as SyncTokens promises. Concurrent callers share
// one: a caller that finds none in flight starts one; one that finds one in
// flight, which may have started before it arrived, waits for the next,
// which starts as soon as the one in flight ends and serves every caller
// that arrived meanwhile. On etcd a heartbeat reads every watched record
// again, so a burst of syncs costs two heartbeats, not one each. ctx bounds
// the caller's wait, not the heartbeat, which others may be waiting for.
func (h *tokenHub) heartbeat(ctx context.Context, feed leasestore.TokenFeed) error {
	h.hbMu.Lock()
	var hb *storeHeartbeat
	switch {
	case h.hbRunning == nil:
		hb = &storeHeartbeat{done: make(chan struct{})}
		h.hbRunning = hb
		go h.runHeartbeats(feed, hb)
	case h.hbNext == nil:
		h.hbNext = &storeHeartbeat{done: make(chan struct{})}
		hb = h.hbNext
	default:
		hb = h.hbNext
	}
	h.hbMu.Unlock()
	select {
	case <-hb.done:
		return hb.err
	case <-ctx.Done():
		return &leasestore.UnavailableError{Op: "sync tokens", Err: ctx.Err()}
	}
}

// runHeartbeats runs hb, then each next heartbeat callers queued while the
// one before ran, until none is queued.
func (h *tokenHub) runHeartbeats(feed leasestore.TokenFeed, hb *storeHeartbeat) {
	for hb != nil {
		ctx, cancel := context.WithTimeout(h.hbCtx, h.hbTimeout)
		hb.err = feed.SyncTokens(ctx)
		cancel()
		close(hb.done)
		h.hbMu.Lock()
		hb, h.hbNext = h.hbNext, nil
		h.hbRunning = hb
		h.hbMu.Unlock()
	}
}

// drop ends w: polls waiting on it are answered, and its store watch is
// closed.
func (h *tokenHub) drop(w *tokenWatch) {
	h.mu.Lock()
	h.dropLocked(w)
	h.mu.Unlock()
	w.stop()
}

// dropLocked takes w out of the hub; h.mu is held. The caller closes w's
// store watch (stop) once it has let go of h.mu: Close waits for a running
// fn.
func (h *tokenHub) dropLocked(w *tokenWatch) {
	if h.watches[w.id] == w {
		delete(h.watches, w.id)
		h.held.release(w.owner)
	}
	w.mu.Lock()
	if !w.gone {
		w.gone = true
		w.wake()
	}
	w.mu.Unlock()
}

// sweep drops the watches nobody polled for tokenWatchIdle.
func (h *tokenHub) sweep() {
	h.mu.Lock()
	now := h.clock.Now()
	var idle []*tokenWatch
	for _, w := range h.watches {
		w.mu.Lock()
		if w.waiting == 0 && now.Sub(w.seen) > tokenWatchIdle {
			idle = append(idle, w)
		}
		w.mu.Unlock()
	}
	for _, w := range idle {
		h.dropLocked(w)
	}
	h.mu.Unlock()
	for _, w := range idle {
		w.stop()
	}
}

// count is how many token watches there are.
func (h *tokenHub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.watches)
}

// close drops every watch and refuses new ones.
func (h *tokenHub) close() {
	h.hbStop()
	h.mu.Lock()
	h.closed = true
	all := make([]*tokenWatch, 0, len(h.watches))
	for _, w := range h.watches {
		all = append(all, w)
	}
	for _, w := range all {
		h.dropLocked(w)
	}
	h.mu.Unlock()
	for _, w := range all {
		w.stop()
	}
}
