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
// sync channel of its own, which hands each change to the hub (package
// feed) from the listener's notification callback. The heartbeat
// (SyncTokens) notifies the sync channel from a pooled connection:
// notifications of every channel reach a listening session in the order
// their transactions committed, so the marker's return proves that every
// change committed before it was sent has been delivered.
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

// StartTokens connects the Store's token feed, whose connection all its
// watches share; see leasestore.Driver. Its heartbeat (Barrier) reads
// again the watches lost since the connection was, notifies the feed's
// sync channel and waits until that notification comes back.
func (s *Store) StartTokens(ctx context.Context, hub *leasestore.TokenHub) (leasestore.TokenSource, error) {
	s.feedMu.Lock()
	defer s.feedMu.Unlock()
	if s.feed != nil {
		return nil, leasestore.ErrFeedStarted
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	f := &tokenFeed{
		s: s, hub: hub, channel: tokenChannel(s.ns), syncChannel: "leasectl_sync_" + hex.EncodeToString(id),
		changed: make(chan struct{}), beats: map[string]chan struct{}{},
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
		return nil, s.unavailable("watch tokens", err)
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

// tokenFeed is the Store's side of its token feed (leasestore.TokenSource): one
// listener, on the namespace's token channel and the feed's sync channel.
type tokenFeed struct {
	s           *Store
	hub         *leasestore.TokenHub
	l           *listener
	channel     string // the namespace's token channel
	syncChannel string // this feed's alone
	ctx         context.Context
	cancel      context.CancelFunc // ends the reads of the listener's goroutine

	mu        sync.Mutex
	listening bool                     // the connection listens, as far as the feed knows
	proven    bool                     // a marker came back: notifications reach the feed's connection
	closed    bool                     // the Store is closed
	lastErr   error                    // why the connection was last lost, or could not connect
	changed   chan struct{}            // closed and replaced when listening, proven or closed change
	beats     map[string]chan struct{} // pending heartbeats by marker, closed when it came back
	seq       uint64
}

// broadcast wakes whoever waits for a change of the feed's state; f.mu is
// held.
func (f *tokenFeed) broadcast() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Follow returns once the feed's connection listens and has shown that
// notifications reach it: the token channel carries every job's changes.
func (f *tokenFeed) Follow(ctx context.Context, _ string) error {
	for {
		f.mu.Lock()
		switch {
		case f.closed:
			f.mu.Unlock()
			return f.s.unavailable("watch tokens", leasestore.ErrClosed)
		case f.listening && f.proven:
			f.mu.Unlock()
			return nil
		case f.listening:
			f.mu.Unlock()
			if err := f.probe(ctx); err != nil {
				return err
			}
		default:
			err := f.awaitListening(ctx)
			f.mu.Unlock()
			if err != nil {
				return f.s.unavailable("watch tokens", err)
			}
		}
	}
}

// Unfollow does nothing: the channel carries every job's changes, and the
// hub drops those of jobs nobody watches.
func (f *tokenFeed) Unfollow(string) {}

// awaitListening waits until the connection listens; f.mu is held, and
// released while waiting.
func (f *tokenFeed) awaitListening(ctx context.Context) error {
	for !f.listening {
		if f.closed {
			return leasestore.ErrClosed
		}
		wait, down := f.changed, f.down()
		f.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			f.mu.Lock()
			return down
		}
		f.mu.Lock()
	}
	return nil
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

// Read reads job's state from the store.
func (f *tokenFeed) Read(ctx context.Context, job string) (leasestore.TokenState, error) {
	var r checkTokenReply
	if err := f.s.call(ctx, "watch tokens", f.s.sqlCheckToken, &r, version(), []byte(job), integer(0)); err != nil {
		return leasestore.TokenState{}, err
	}
	return leasestore.TokenState{Job: job, Token: r.Current, Live: r.Live, Read: true}, nil
}

// up is the listener's: the connection listens. On a new connection after
// a lost one, every watch reads its state again: what was published
// meanwhile is lost.
func (f *tokenFeed) up(first bool) {
	f.mu.Lock()
	f.listening = true
	f.broadcast()
	f.mu.Unlock()
	if first {
		return
	}
	ctx, cancel := context.WithTimeout(f.ctx, feedReadTimeout)
	defer cancel()
	_ = f.hub.Reread(ctx, true)
}

// lost is the listener's: the connection was lost, or could not be made
// again. Every watch is told that changes may have been missed.
func (f *tokenFeed) lost(err error) {
	f.mu.Lock()
	f.lastErr = err
	if f.listening {
		f.listening = false
		f.broadcast()
	}
	f.mu.Unlock()
	f.hub.Lost()
}

// notified is the listener's: a change of some job of the namespace, or
// one of the feed's heartbeat markers.
func (f *tokenFeed) notified(n *pgconn.Notification) {
	switch n.Channel {
	case f.syncChannel:
		f.mu.Lock()
		if b := f.beats[n.Payload]; b != nil {
			delete(f.beats, n.Payload)
			close(b)
		}
		if !f.proven {
			f.proven = true
			f.broadcast()
		}
		f.mu.Unlock()
	case f.channel:
		if st, ok := parseChange(n.Payload); ok {
			f.hub.Publish(st)
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

// Barrier is SyncTokens' round trip of a marker, once the watches lost
// since the connection was have read their state again.
func (f *tokenFeed) Barrier(ctx context.Context) error {
	return f.roundTrip(ctx, "sync tokens", "")
}

// roundTrip waits until the connection listens, reads the lost watches
// again, sends a marker on the sync channel from a pooled connection and
// waits until it comes back; then every change committed before the call
// has reached the hub. op names the operation in errors, and hint follows
// the error of a marker that did not come back.
func (f *tokenFeed) roundTrip(ctx context.Context, op, hint string) error {
	unavailable := func(err error) error { return f.s.unavailable(op, err) }
	f.mu.Lock()
	if err := f.awaitListening(ctx); err != nil {
		f.mu.Unlock()
		return unavailable(err)
	}
	f.mu.Unlock()
	// A read after the call began covers every change before it.
	if err := f.hub.Reread(ctx, true); err != nil {
		return err
	}
	f.mu.Lock()
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
		return nil
	case <-ctx.Done():
		// Not through unavailable, which would name only the deadline.
		return &leasestore.UnavailableError{Op: op, Err: fmt.Errorf("%w%s", errNoMarker, hint)}
	}
}
