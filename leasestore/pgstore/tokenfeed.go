package pgstore

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasectl/leasectl/leasestore"
)

// Token changes travel by LISTEN/NOTIFY too: acquire's grant, release and
// a counted crash call _publish_token (sql/lib.sql), which notifies the
// namespace's one token channel with 'g' (a grant) or 'e' (an end), the
// token, a space and the job. PostgreSQL delivers a notification only if
// its transaction commits, and delivers them in commit order.
//
// A Store's feed is one listener (notify.go) on the token channel and on a
// sync channel of its own, and the watches filter the jobs they follow;
// its goroutine calls their fns, from the listener's notification callback.
// The heartbeat (SyncTokens) notifies the sync channel from a pooled
// connection: notifications of every channel reach a listening session in
// the order their transactions committed, so the marker's return proves
// that every change committed before it was sent has been delivered.
//
// Behind PgBouncer in transaction pooling, LISTEN is accepted and hears
// nothing (the server session is handed to other clients between
// transactions). The feed does not trust a listening connection until a
// marker came back on it, so WatchTokens fails there, saying why, rather
// than return a watch that never hears a change.

const (
	// feedReadTimeout bounds the reads of watched jobs' states after the
	// feed's connection came back. A read that fails leaves its watch
	// lost (its checker asks the store) until a heartbeat reads it again.
	feedReadTimeout = 5 * time.Second

	// feedProbeTimeout bounds how long WatchTokens waits for the first
	// marker on a connection that has not yet shown that notifications
	// reach it, when ctx allows longer: long enough for a loaded server,
	// short enough that a feed behind a transaction-pooling PgBouncer
	// fails its caller soon.
	feedProbeTimeout = 5 * time.Second
)

// Payload prefixes on the token channel (sql/lib.sql, _publish_token).
const (
	grantPrefix = 'g'
	endPrefix   = 'e'
)

// tokenChannel is namespace's token channel, as lib.sql's _publish_token
// names it.
func tokenChannel(namespace string) string {
	sum := md5.Sum([]byte(namespace))
	return "leasectl_tokens_" + hex.EncodeToString(sum[:])
}

// WatchTokens starts following job's fencing state; see
// leasestore.TokenFeed. The first watch of a Store opens the feed's
// connection, which all its watches share.
func (s *Store) WatchTokens(ctx context.Context, job string, fn func(leasestore.TokenState)) (leasestore.TokenWatch, error) {
	f, err := s.tokenFeed(ctx)
	if err != nil {
		return nil, s.unavailable("watch tokens", err)
	}
	return f.watch(ctx, job, fn)
}

// SyncTokens is the feed's heartbeat; see leasestore.TokenFeed. It reads
// again the watches lost since the connection was, notifies the feed's
// sync channel and waits until that notification comes back.
func (s *Store) SyncTokens(ctx context.Context) error {
	s.feedMu.Lock()
	f := s.feed
	s.feedMu.Unlock()
	if f == nil {
		return nil
	}
	return f.sync(ctx)
}

// tokenFeed returns the Store's feed, connecting it on first use.
func (s *Store) tokenFeed(ctx context.Context) (*tokenFeed, error) {
	s.feedMu.Lock()
	defer s.feedMu.Unlock()
	if s.closed.Load() {
		return nil, errClosed
	}
	if s.feed != nil {
		return s.feed, nil
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	f := &tokenFeed{
		s: s, channel: tokenChannel(s.ns), syncChannel: "leasectl_sync_" + hex.EncodeToString(id),
		changed: make(chan struct{}), watches: map[string][]*tokenWatch{}, beats: map[string]chan struct{}{},
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	l, err := s.listen(ctx, &listener{
		listen:   "LISTEN " + quoteIdent(f.channel) + "; LISTEN " + quoteIdent(f.syncChannel),
		notified: f.notified,
		up:       f.up,
		lost:     f.lost,
	})
	if err != nil {
		f.cancel()
		return nil, err
	}
	f.l = l
	s.feed = f
	return f, nil
}

// closeFeed stops the Store's feed, if it was started.
func (s *Store) closeFeed() {
	s.feedMu.Lock()
	f := s.feed
	s.feedMu.Unlock()
	if f == nil {
		return
	}
	f.cancel()
	f.l.close()
	f.mu.Lock()
	f.listening = false
	f.closed = true
	f.broadcast()
	f.mu.Unlock()
}

// tokenFeed is the Store's leasestore.TokenFeed: one listener, on the
// namespace's token channel and the feed's sync channel.
type tokenFeed struct {
	s           *Store
	l           *listener
	channel     string // the namespace's token channel
	syncChannel string // this feed's alone
	ctx         context.Context
	cancel      context.CancelFunc // ends the reads of the listener's goroutine

	// mu guards what follows and is held while fns run and while watches'
	// states are read, so that each watch gets its read before the changes
	// received after it, and Close waits for a running fn.
	mu        sync.Mutex
	listening bool          // the connection listens, as far as the feed knows
	proven    bool          // a marker came back: notifications reach the feed's connection
	closed    bool          // the Store is closed
	lastErr   error         // why the connection was last lost, or could not connect
	changed   chan struct{} // closed and replaced when listening, proven or closed change
	watches   map[string][]*tokenWatch
	beats     map[string]chan struct{} // pending heartbeats by marker, closed when it came back
	seq       uint64
}

// tokenWatch is one watch of one job.
type tokenWatch struct {
	f      *tokenFeed
	job    string
	fn     func(leasestore.TokenState)
	synced bool // fn has had a read since the watch started or was lost; guarded by f.mu
}

// broadcast wakes whoever waits for a change of the feed's state; f.mu is
// held.
func (f *tokenFeed) broadcast() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// watch adds a watch of job once the feed's connection listens and has
// shown that notifications reach it, and reports its first state.
func (f *tokenFeed) watch(ctx context.Context, job string, fn func(leasestore.TokenState)) (leasestore.TokenWatch, error) {
	for {
		f.mu.Lock()
		switch {
		case f.closed:
			f.mu.Unlock()
			return nil, f.s.unavailable("watch tokens", errClosed)
		case f.listening && f.proven:
			defer f.mu.Unlock()
			// Read with the feed's lock held: a change received meanwhile
			// reaches the new watch after its read, which it may repeat.
			st, err := f.read(ctx, job)
			if err != nil {
				return nil, err
			}
			w := &tokenWatch{f: f, job: job, fn: fn, synced: true}
			f.watches[job] = append(f.watches[job], w)
			w.fn(st)
			return w, nil
		case f.listening:
			f.mu.Unlock()
			if err := f.probe(ctx); err != nil {
				return nil, err
			}
		default:
			wait, down := f.changed, f.down()
			f.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return nil, f.s.unavailable("watch tokens", down)
			}
		}
	}
}

// probe sends a marker on the feed's sync channel and waits for it, so that
// the feed knows that notifications reach its connection.
func (f *tokenFeed) probe(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, feedProbeTimeout)
	defer cancel()
	return f.roundTrip(pctx, "watch tokens", " (behind PgBouncer in transaction pooling mode, LISTEN is accepted and "+
		"hears nothing: point the token feed at PostgreSQL itself or at a session-pooled PgBouncer)")
}

// errNoMarker is the cause of a heartbeat whose notification did not come
// back on the feed's connection in time: changes may be late or lost.
var errNoMarker = errors.New("pgstore: a notification sent to the token feed's own channel did not come back on its listening connection in time")

// down is why the feed's connection does not listen; f.mu is held.
func (f *tokenFeed) down() error {
	if f.lastErr == nil {
		return errors.New("the token feed's connection does not listen yet")
	}
	return fmt.Errorf("the token feed's connection is down: %v", f.lastErr)
}

// Close stops the watch; fn is not called once it has returned.
func (w *tokenWatch) Close() error {
	f := w.f
	f.mu.Lock()
	defer f.mu.Unlock()
	list := f.watches[w.job]
	for i, o := range list {
		if o == w {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(f.watches, w.job)
	} else {
		f.watches[w.job] = list
	}
	return nil
}

// read reads job's state from the store; f.mu is held.
func (f *tokenFeed) read(ctx context.Context, job string) (leasestore.TokenState, error) {
	var r struct {
		Current int64 `json:"current"`
		Live    bool  `json:"live"`
	}
	if err := f.s.call(ctx, "watch tokens", f.s.sqlCheckToken, &r, version(), []byte(job)); err != nil {
		return leasestore.TokenState{}, err
	}
	return leasestore.TokenState{Job: job, Token: r.Current, Live: r.Live, Read: true}, nil
}

// readLost reads the state of every watch that has had none since it was
// lost and reports it; f.mu is held. It returns the first failure: those
// watches stay lost.
func (f *tokenFeed) readLost(ctx context.Context) error {
	var first error
	for job, list := range f.watches {
		if !anyLost(list) {
			continue
		}
		st, err := f.read(ctx, job)
		if err != nil {
			first = cmpOr(first, err)
			continue
		}
		for _, w := range list {
			w.fn(st)
			w.synced = true
		}
	}
	return first
}

// anyLost reports whether a watch of list has had no read since it was
// lost.
func anyLost(list []*tokenWatch) bool {
	for _, w := range list {
		if !w.synced {
			return true
		}
	}
	return false
}

// cmpOr is the first of a and b that is not nil.
func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// up is the listener's: the connection listens. On a new connection after
// a lost one, every watch reads its state again: what was published
// meanwhile is lost.
func (f *tokenFeed) up(first bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listening = true
	f.broadcast()
	if first {
		return
	}
	ctx, cancel := context.WithTimeout(f.ctx, feedReadTimeout)
	defer cancel()
	_ = f.readLost(ctx)
}

// lost is the listener's: the connection was lost, or could not be made
// again. Every watch is told that changes may have been missed.
func (f *tokenFeed) lost(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastErr = err
	if f.listening {
		f.listening = false
		f.broadcast()
	}
	for _, list := range f.watches {
		for _, w := range list {
			if w.synced {
				w.synced = false
				w.fn(leasestore.TokenState{Job: w.job, Lost: true})
			}
		}
	}
}

// notified is the listener's: a change of some job of the namespace, or
// one of the feed's heartbeat markers.
func (f *tokenFeed) notified(n *pgconn.Notification) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch n.Channel {
	case f.syncChannel:
		if b := f.beats[n.Payload]; b != nil {
			delete(f.beats, n.Payload)
			close(b)
		}
		if !f.proven {
			f.proven = true
			f.broadcast()
		}
	case f.channel:
		st, ok := parseChange(n.Payload)
		if !ok {
			return
		}
		for _, w := range f.watches[st.Job] {
			if w.synced {
				w.fn(st)
			}
		}
	}
}

// parseChange parses a grant or an end: 'g' or 'e', the token, a space and
// the job.
func parseChange(payload string) (leasestore.TokenState, bool) {
	if payload == "" || payload[0] != grantPrefix && payload[0] != endPrefix {
		return leasestore.TokenState{}, false
	}
	token, job, ok := strings.Cut(payload[1:], " ")
	if !ok {
		return leasestore.TokenState{}, false
	}
	n, err := strconv.ParseInt(token, 10, 64)
	if err != nil {
		return leasestore.TokenState{}, false
	}
	return leasestore.TokenState{Job: job, Token: n, Live: payload[0] == grantPrefix}, true
}

// sync is SyncTokens: a round trip of a marker, once the watches lost
// since the connection was have read their state again.
func (f *tokenFeed) sync(ctx context.Context) error {
	f.mu.Lock()
	n := len(f.watches)
	f.mu.Unlock()
	if n == 0 {
		return nil
	}
	return f.roundTrip(ctx, "sync tokens", "")
}

// roundTrip waits until the connection listens, reads the lost watches
// again, sends a marker on the sync channel from a pooled connection and
// waits until it comes back; then every change committed before the call
// has reached the watches' fns. It fails when a watch is lost at the end;
// op names the operation in errors, and hint follows the error of a marker
// that did not come back.
func (f *tokenFeed) roundTrip(ctx context.Context, op, hint string) error {
	unavailable := func(err error) error { return f.s.unavailable(op, err) }
	f.mu.Lock()
	for !f.listening {
		if f.closed {
			f.mu.Unlock()
			return unavailable(errClosed)
		}
		wait, down := f.changed, f.down()
		f.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return unavailable(down)
		}
		f.mu.Lock()
	}
	// A read after the call began covers every change before it.
	if err := f.readLost(ctx); err != nil {
		f.mu.Unlock()
		return err
	}
	f.seq++
	marker := strconv.FormatUint(f.seq, 10)
	back := make(chan struct{})
	f.beats[marker] = back
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.beats, marker)
		f.mu.Unlock()
	}()

	var ok bool
	err := f.s.exec(ctx, "SELECT 'true'::json FROM pg_notify($1::text, $2::text)", &ok,
		[][]byte{[]byte(f.syncChannel), []byte(marker)})
	if err != nil {
		return unavailable(err)
	}
	select {
	case <-back:
	case <-ctx.Done():
		// Not through unavailable, which would name only the deadline.
		return &leasestore.UnavailableError{Op: op, Err: fmt.Errorf("%w%s", errNoMarker, hint)}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for job, list := range f.watches {
		if anyLost(list) {
			return unavailable(fmt.Errorf("the feed's connection was lost, and job %q has not read its state since", job))
		}
	}
	return nil
}
