package httpstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
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

// StartTokens returns the Store's side of its token feed, which follows
// jobs through the registry's store; see leasestore.Driver. The first watch
// of a job makes a watch of it in the registry, whose states a goroutine
// collects with long-polls, one at a time (each job holds one request, so
// one connection, to the registry), until its last watch closes. When a
// poll fails (the registry restarted or cannot be reached, or the watch
// fell behind), the job's watches get a Lost state, and the registry's
// watch is made again, with backoff, its first state a fresh read. The
// heartbeat (Barrier) asks the registry to run its store's heartbeat and
// to say how far each of this Store's watches had got then, and waits
// until each has handed its states that far to the hub.
func (s *Store) StartTokens(_ context.Context, hub *leasestore.TokenHub) (leasestore.TokenSource, error) {
	if !s.feedStarted.CompareAndSwap(false, true) {
		return nil, leasestore.ErrFeedStarted
	}
	return &tokenSource{s: s, hub: hub, watches: map[string]*registryWatch{}}, nil
}

// tokenSource is the Store's side of its token feed (leasestore.TokenSource): a
// watch in the registry per job followed.
type tokenSource struct {
	s   *Store
	hub *leasestore.TokenHub

	mu      sync.Mutex
	watches map[string]*registryWatch // by job
}

// registryWatch is the registry's watch of one job, followed by its own
// goroutine (poll).
type registryWatch struct {
	job    string
	ctx    context.Context // ends with Unfollow
	cancel context.CancelFunc
	done   chan struct{} // closed when poll returns

	// Guarded by tokenSource.mu.
	id       string        // the registry's watch; replaced when it is made again
	gen      int           // how many times it was made again
	seq      int64         // the seq of the newest state handed to the hub, in watch id
	progress chan struct{} // closed and replaced when seq or gen change
}

// Follow makes a watch of job in the registry and starts collecting its
// states.
func (f *tokenSource) Follow(ctx context.Context, job string) error {
	tw, err := f.s.watchTokens(ctx, job)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(context.Background())
	w := &registryWatch{job: job, ctx: wctx, cancel: cancel, done: make(chan struct{}), id: tw.WatchID, progress: make(chan struct{})}
	f.mu.Lock()
	f.watches[job] = w
	f.mu.Unlock()
	f.publish(w, tw.States)
	go f.poll(w)
	return nil
}

// Unfollow stops collecting job's states and ends its watch in the
// registry, best effort (bounded by closeTimeout).
func (f *tokenSource) Unfollow(job string) {
	f.mu.Lock()
	w := f.watches[job]
	delete(f.watches, job)
	f.mu.Unlock()
	if w == nil {
		return
	}
	w.cancel()
	<-w.done
	f.mu.Lock()
	id := w.id
	f.mu.Unlock()
	f.s.unwatch(id)
}

// Read reads job's state from its status in the registry's store: the
// last token, live while a live lease is its, in whichever slot (Holder is
// only the lowest slot's of a job of several).
func (f *tokenSource) Read(ctx context.Context, job string) (leasestore.TokenState, error) {
	st, err := f.s.Status(ctx, job)
	if err != nil {
		return leasestore.TokenState{}, err
	}
	live := st.Holder != nil && st.Holder.Token == st.LastToken ||
		slices.ContainsFunc(st.Holders, func(h leasestore.Holder) bool { return h.Token == st.LastToken })
	return leasestore.TokenState{Job: job, Token: st.LastToken, Live: live, Read: true}, nil
}

// publish hands the hub w's states newer than the last handed, in order.
func (f *tokenSource) publish(w *registryWatch, states []api.TokenState) {
	for _, a := range states {
		f.mu.Lock()
		stale := a.Seq <= w.seq
		f.mu.Unlock()
		if stale {
			continue
		}
		f.hub.Publish(a.ToStore(w.job))
		f.mu.Lock()
		w.seq = a.Seq
		w.changed()
		f.mu.Unlock()
	}
}

// changed wakes the heartbeats waiting on w; tokenSource.mu is held.
func (w *registryWatch) changed() {
	close(w.progress)
	w.progress = make(chan struct{})
}

// poll collects w's states until Unfollow. When a poll fails, the job's
// watches are told so, and w is made again.
func (f *tokenSource) poll(w *registryWatch) {
	defer close(w.done)
	s := f.s
	for {
		f.mu.Lock()
		id, after := w.id, w.seq
		f.mu.Unlock()
		q := url.Values{"after": {strconv.FormatInt(after, 10)}, "timeout_ms": {strconv.FormatInt(api.MS(pollTimeout), 10)}}
		ctx, cancel := context.WithTimeout(w.ctx, pollTimeout+pollMargin)
		var ts api.TokenStates
		err := s.do(ctx, call{op: "poll token watch", method: http.MethodGet, path: api.PathTokenWatch + url.PathEscape(id), query: q, single: true}, &ts)
		cancel()
		if w.ctx.Err() != nil {
			return
		}
		if err == nil {
			f.publish(w, ts.States)
			continue
		}
		// Interrupted: states may be missed from here on.
		f.hub.Lost(w.job)
		f.mu.Lock()
		w.gen++
		w.changed()
		f.mu.Unlock()
		var e *api.Error
		if !errors.As(err, &e) || e.Code != api.CodeTokenWatchNotFound && e.Code != api.CodeTokenWatchBehind && e.Code != api.CodeShuttingDown {
			// The registry may still hold it: end it there, best effort.
			go s.unwatch(id)
		}
		if !f.rewatch(w) {
			return
		}
	}
}

// rewatch makes w again, retrying with backoff until it succeeds (true) or
// Unfollow (false), and hands its first states, a fresh read, to the hub.
func (f *tokenSource) rewatch(w *registryWatch) bool {
	backoff := minBackoff
	for {
		ctx, cancel := context.WithTimeout(w.ctx, pollMargin)
		tw, err := f.s.watchTokens(ctx, w.job)
		cancel()
		if w.ctx.Err() != nil {
			if err == nil {
				go f.s.unwatch(tw.WatchID)
			}
			return false
		}
		if err == nil {
			f.mu.Lock()
			w.id, w.seq = tw.WatchID, 0
			f.mu.Unlock()
			f.publish(w, tw.States)
			return true
		}
		if !sleep(w.ctx, backoff) {
			return false
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// Barrier asks the registry to run its store's heartbeat and to say how
// far each of the registry's watches had got then, and waits until each
// has handed its states that far to the hub. Jobs whose watch is being
// made again are left to the hub, which fails the heartbeat for them.
func (f *tokenSource) Barrier(ctx context.Context) error {
	type mark struct {
		w   *registryWatch
		gen int
	}
	f.mu.Lock()
	marks := make(map[string]mark, len(f.watches))
	ids := make([]string, 0, len(f.watches))
	for _, w := range f.watches {
		marks[w.id] = mark{w, w.gen}
		ids = append(ids, w.id)
	}
	f.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	var ts api.TokenSync
	err := f.s.do(ctx, call{op: "sync tokens", method: http.MethodPost, path: api.PathTokenSync, body: api.TokenSyncRequest{WatchIDs: ids}}, &ts)
	if err != nil {
		return f.s.feedError("sync tokens", err)
	}
	if len(ts.Missing) > 0 {
		job := ""
		if m, ok := marks[ts.Missing[0]]; ok {
			job = m.w.job
		}
		return &leasestore.UnavailableError{Op: "sync tokens", Err: fmt.Errorf("registry %s no longer holds the token watch of job %q (%d missing): changes may be lost until it is made again", f.s.display, job, len(ts.Missing))}
	}
	for _, ws := range ts.Watches {
		if m, ok := marks[ws.WatchID]; ok {
			if err := f.await(ctx, m.w, m.gen, ws.Seq); err != nil {
				return err
			}
		}
	}
	return nil
}

// await waits until w, still in generation gen, has handed the state
// numbered seq to the hub.
func (f *tokenSource) await(ctx context.Context, w *registryWatch, gen int, seq int64) error {
	for {
		f.mu.Lock()
		switch {
		case w.ctx.Err() != nil:
			f.mu.Unlock()
			return nil // no longer followed
		case w.gen != gen:
			f.mu.Unlock()
			return &leasestore.UnavailableError{Op: "sync tokens",
				Err: fmt.Errorf("the token watch of job %q through registry %s was interrupted", w.job, f.s.display)}
		case w.seq >= seq:
			f.mu.Unlock()
			return nil
		}
		progress := w.progress
		f.mu.Unlock()
		select {
		case <-progress:
		case <-ctx.Done():
			return &leasestore.UnavailableError{Op: "sync tokens",
				Err: fmt.Errorf("the token watch of job %q had not delivered the registry's state %d: %w", w.job, seq, ctx.Err())}
		}
	}
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

// unwatch ends watch id in the registry, best effort, bounded by
// closeTimeout; the registry drops a watch nobody polls by itself.
func (s *Store) unwatch(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = s.do(ctx, call{op: "unwatch tokens", method: http.MethodDelete, path: api.PathTokenWatch + url.PathEscape(id)}, nil)
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
