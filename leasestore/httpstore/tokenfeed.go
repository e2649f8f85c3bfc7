package httpstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
)

// ErrNoTokenFeed is the cause of WatchTokens' and SyncTokens' errors when
// an older registry says that its store has no token feed: check tokens with
// CheckToken instead (fence's authoritative or
// bounded-staleness pattern; a write-through Checker falls back to it by
// itself). The errors also match leasestore.ErrUnavailable.
var ErrNoTokenFeed = errors.New("the store behind the registry has no token feed")

// feed is a Store's token watches.
type feed struct {
	// deliver is held while a watch's fn runs: one call at a time per
	// store, as leasestore.TokenFeed promises.
	deliver sync.Mutex

	mu      sync.Mutex
	watches map[*tokenWatch]struct{}
	closed  bool
}

// WatchTokens starts following job's fencing state through the registry's
// store; see leasestore.TokenFeed. It returns once the registry's watch is
// in place and fn has had its first state, a read. A goroutine then
// collects the watch's states with long-polls, one at a time (each watch
// holds one request, so one connection, to the registry), until Close.
// When a poll fails (the registry restarted or cannot be reached, or the
// watch fell behind), fn gets a Lost state, and the watch is made again,
// with backoff, its first state a fresh read.
func (s *Store) WatchTokens(ctx context.Context, job string, fn func(leasestore.TokenState)) (leasestore.TokenWatch, error) {
	if err := leasestore.ValidateJobID(job); err != nil {
		return nil, &leasestore.RequestError{Op: "watch tokens", Field: "job", Reason: err.Error()}
	}
	s.feed.mu.Lock()
	closed := s.feed.closed
	s.feed.mu.Unlock()
	if closed {
		return nil, &leasestore.UnavailableError{Op: "watch tokens", Err: errors.New("the store is closed")}
	}
	tw, err := s.watchTokens(ctx, job)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithCancel(context.Background())
	w := &tokenWatch{store: s, job: job, fn: fn, ctx: pctx, cancel: cancel, done: make(chan struct{}),
		id: tw.WatchID, progress: make(chan struct{})}
	w.deliver(tw.States)

	s.feed.mu.Lock()
	if s.feed.closed {
		s.feed.mu.Unlock()
		cancel()
		close(w.done)
		// Made in the registry just now: end it there rather than leave it
		// to the registry's idle sweep.
		go s.unwatch(tw.WatchID)
		return nil, &leasestore.UnavailableError{Op: "watch tokens", Err: errors.New("the store is closed")}
	}
	if s.feed.watches == nil {
		s.feed.watches = map[*tokenWatch]struct{}{}
	}
	s.feed.watches[w] = struct{}{}
	s.feed.mu.Unlock()
	go w.poll()
	return w, nil
}

// watchTokens makes a watch of job in the registry.
func (s *Store) watchTokens(ctx context.Context, job string) (api.TokenWatch, error) {
	var tw api.TokenWatch
	err := s.do(ctx, call{op: "watch tokens", method: http.MethodPost, path: api.PathTokenWatches, body: api.TokenWatchRequest{JobID: job}}, &tw)
	if err != nil {
		return tw, s.feedError("watch tokens", err)
	}
	if len(tw.States) == 0 || !tw.States[0].Read {
		return tw, &leasestore.UnavailableError{Op: "watch tokens", Err: fmt.Errorf("registry %s: the watch answered without its first read", s.display)}
	}
	return tw, nil
}

// feedError is err of a token feed call: ErrNoTokenFeed when the registry
// said its store has none, and in any case an error matching
// leasestore.ErrUnavailable.
func (s *Store) feedError(op string, err error) error {
	var e *api.Error
	switch {
	case errors.As(err, &e) && e.Code == api.CodeNoTokenFeed:
		return &leasestore.UnavailableError{Op: op, Err: fmt.Errorf("registry %s: %w (check tokens with CheckToken instead)", s.display, ErrNoTokenFeed)}
	case errors.Is(err, leasestore.ErrUnavailable):
		return err
	default:
		return &leasestore.UnavailableError{Op: op, Err: err}
	}
}

// SyncTokens is the feed's heartbeat; see leasestore.TokenFeed. It fails
// at once while a watch is interrupted (it has not had its fresh read yet);
// else it asks the registry to run its store's heartbeat and to say how far
// each of this Store's watches had got then, and waits until each has
// delivered its states that far.
func (s *Store) SyncTokens(ctx context.Context) error {
	type mark struct {
		w   *tokenWatch
		gen int
	}
	s.feed.mu.Lock()
	marks := make(map[string]mark, len(s.feed.watches))
	ids := make([]string, 0, len(s.feed.watches))
	for w := range s.feed.watches {
		w.mu.Lock()
		id, gen, whole := w.id, w.gen, w.whole
		w.mu.Unlock()
		if !whole {
			s.feed.mu.Unlock()
			return w.interrupted()
		}
		marks[id] = mark{w, gen}
		ids = append(ids, id)
	}
	s.feed.mu.Unlock()

	var ts api.TokenSync
	err := s.do(ctx, call{op: "sync tokens", method: http.MethodPost, path: api.PathTokenSync, body: api.TokenSyncRequest{WatchIDs: ids}}, &ts)
	if err != nil {
		return s.feedError("sync tokens", err)
	}
	if len(ts.Missing) > 0 {
		job := ""
		if m, ok := marks[ts.Missing[0]]; ok {
			job = m.w.job
		}
		return &leasestore.UnavailableError{Op: "sync tokens", Err: fmt.Errorf("registry %s no longer holds the token watch of job %q (%d missing): changes may be lost until it is made again", s.display, job, len(ts.Missing))}
	}
	for _, ws := range ts.Watches {
		m, ok := marks[ws.WatchID]
		if !ok {
			continue
		}
		if err := m.w.await(ctx, m.gen, ws.Seq); err != nil {
			return err
		}
	}
	return nil
}

// tokenWatch follows one job's token through a watch in the registry.
type tokenWatch struct {
	store  *Store
	job    string
	fn     func(leasestore.TokenState)
	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	done   chan struct{} // closed when poll returns
	once   sync.Once

	mu       sync.Mutex
	id       string        // the registry's watch; replaced when it is made again
	gen      int           // how many times it was made again
	seq      int64         // the seq of the newest state delivered, in watch id
	whole    bool          // a read was delivered since the last Lost
	closed   bool          // Close was called
	progress chan struct{} // closed and replaced when seq, gen, whole or closed change
}

// changedLocked wakes SyncTokens calls waiting on w; w.mu is held.
func (w *tokenWatch) changedLocked() {
	close(w.progress)
	w.progress = make(chan struct{})
}

// interrupted is SyncTokens' error while w has not read its job again.
func (w *tokenWatch) interrupted() error {
	return &leasestore.UnavailableError{Op: "sync tokens",
		Err: fmt.Errorf("the token watch of job %q through registry %s was interrupted and has not read the job again yet", w.job, w.store.display)}
}

// await waits until w, still in generation gen, has delivered the state
// numbered seq.
func (w *tokenWatch) await(ctx context.Context, gen int, seq int64) error {
	for {
		w.mu.Lock()
		switch {
		case w.closed:
			w.mu.Unlock()
			return nil // no longer watched
		case w.gen != gen || !w.whole:
			w.mu.Unlock()
			return w.interrupted()
		case w.seq >= seq:
			w.mu.Unlock()
			return nil
		}
		progress := w.progress
		w.mu.Unlock()
		select {
		case <-progress:
		case <-ctx.Done():
			return &leasestore.UnavailableError{Op: "sync tokens",
				Err: fmt.Errorf("the token watch of job %q had not delivered the registry's state %d: %w", w.job, seq, ctx.Err())}
		}
	}
}

// deliver passes states newer than the last delivered to fn, in order,
// unless Close was called. Whether the watch is whole changes before fn
// sees the state: a SyncTokens made once fn has seen a fresh read is not
// refused as interrupted, and still waits for that read's seq, which is
// counted once fn has returned.
func (w *tokenWatch) deliver(states []api.TokenState) {
	for _, a := range states {
		w.mu.Lock()
		stale := a.Seq <= w.seq
		if !stale {
			switch {
			case a.Lost:
				w.whole = false
			case a.Read:
				w.whole = true
			}
			w.changedLocked()
		}
		w.mu.Unlock()
		if stale {
			continue
		}
		if !w.call(a.ToStore(w.job)) {
			return
		}
		w.mu.Lock()
		w.seq = a.Seq
		w.changedLocked()
		w.mu.Unlock()
	}
}

// call runs fn with st, one call at a time per store, unless Close was
// called (false).
func (w *tokenWatch) call(st leasestore.TokenState) bool {
	f := &w.store.feed
	f.deliver.Lock()
	defer f.deliver.Unlock()
	if w.ctx.Err() != nil {
		return false
	}
	w.fn(st)
	return true
}

// poll collects w's states until Close. When a poll fails, w reports the
// feed lost and makes its watch again.
func (w *tokenWatch) poll() {
	defer close(w.done)
	s := w.store
	for {
		w.mu.Lock()
		id, after := w.id, w.seq
		w.mu.Unlock()
		q := url.Values{"after": {strconv.FormatInt(after, 10)}, "timeout_ms": {strconv.FormatInt(api.MS(pollTimeout), 10)}}
		ctx, cancel := context.WithTimeout(w.ctx, pollTimeout+pollMargin)
		var ts api.TokenStates
		err := s.do(ctx, call{op: "poll token watch", method: http.MethodGet, path: api.PathTokenWatch + url.PathEscape(id), query: q, single: true}, &ts)
		cancel()
		if w.ctx.Err() != nil {
			return
		}
		if err == nil {
			w.deliver(ts.States)
			continue
		}
		// Interrupted: states may be missed from here on.
		if !w.call(leasestore.TokenState{Job: w.job, Lost: true}) {
			return
		}
		w.mu.Lock()
		w.gen++
		w.whole = false
		w.changedLocked()
		w.mu.Unlock()
		var e *api.Error
		if !errors.As(err, &e) || e.Code != api.CodeTokenWatchNotFound && e.Code != api.CodeTokenWatchBehind && e.Code != api.CodeShuttingDown {
			// The registry may still hold it: end it there, best effort.
			go s.unwatch(id)
		}
		if !w.rewatch() {
			return
		}
	}
}

// rewatch makes w's watch again, retrying with backoff until it succeeds
// (true) or Close (false), and delivers its first states.
func (w *tokenWatch) rewatch() bool {
	backoff := minBackoff
	for {
		ctx, cancel := context.WithTimeout(w.ctx, pollMargin)
		tw, err := w.store.watchTokens(ctx, w.job)
		cancel()
		if w.ctx.Err() != nil {
			if err == nil {
				go w.store.unwatch(tw.WatchID)
			}
			return false
		}
		if err == nil {
			w.mu.Lock()
			w.id, w.seq = tw.WatchID, 0
			w.mu.Unlock()
			w.deliver(tw.States)
			return true
		}
		if !sleep(w.ctx, backoff) {
			return false
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// unwatch ends watch id in the registry, best effort, bounded by
// closeTimeout; the registry drops a watch nobody polls by itself.
func (s *Store) unwatch(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = s.do(ctx, call{op: "unwatch tokens", method: http.MethodDelete, path: api.PathTokenWatch + url.PathEscape(id)}, nil)
}

// Close stops the watch: fn is not called once it has returned. It ends
// the watch in the registry too, best effort (bounded by closeTimeout).
func (w *tokenWatch) Close() error {
	w.once.Do(func() {
		w.stop()
		w.mu.Lock()
		id := w.id
		w.mu.Unlock()
		w.store.unwatch(id)
	})
	return nil
}

// stop ends w's polls and takes it out of its Store's watches.
func (w *tokenWatch) stop() {
	w.cancel()
	<-w.done
	w.mu.Lock()
	w.closed = true
	w.changedLocked()
	w.mu.Unlock()
	f := &w.store.feed
	f.mu.Lock()
	delete(f.watches, w)
	f.mu.Unlock()
}

// closeFeed stops every watch of the Store, without ending them in the
// registry (it drops them once nobody polls them), and refuses new ones.
func (s *Store) closeFeed() {
	s.feed.mu.Lock()
	s.feed.closed = true
	ws := make([]*tokenWatch, 0, len(s.feed.watches))
	for w := range s.feed.watches {
		ws = append(ws, w)
	}
	s.feed.mu.Unlock()
	for _, w := range ws {
		w.once.Do(w.stop)
	}
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
