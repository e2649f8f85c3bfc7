package pgstore

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasectl/leasectl/leasestore"
)

// Release notifications travel by LISTEN/NOTIFY: the functions that free a
// job (release, a counted crash, unquarantine, a waiter leaving) call
// pg_notify on the job's channel, and on the channel of each waiter whose
// turn it is (lib.sql, _wake_waiters), which PostgreSQL delivers when their
// transaction commits, to every session listening on it then. A
// subscription is one connection of its own, listening on one channel: its
// waiter's, so that a release does not wake the waiters behind the first.
//
// Delivery is best effort. Notifications sent while the subscription's
// connection is down are lost, so after it reconnects it wakes its waiter
// once, for a refused Acquire at worst; the waiter also retries when the
// holder's lease would expire (leasestore.HeldError.ExpiresIn). Behind
// PgBouncer in transaction pooling mode LISTEN does not work at all (the
// server connection is handed to other clients between transactions), and
// waiters wake only at the holder's expiry: point waiters at PostgreSQL
// itself or at a session-pooled PgBouncer.

// Reconnect delays of a subscription whose connection was lost: doubling,
// jittered, from the first to the last.
const (
	reconnectFirst = 50 * time.Millisecond
	reconnectLast  = 2 * time.Second
)

// channel is job's LISTEN/NOTIFY channel in namespace: an identifier of
// PostgreSQL's length, as lib.sql's _channel makes it.
func channel(namespace, job string) string {
	return hashedChannel(namespace + "\n" + job)
}

// waiterChannel is the channel of waiter of job in namespace, as lib.sql's
// _waiter_channel makes it.
func waiterChannel(namespace, job, waiter string) string {
	return hashedChannel(namespace + "\n" + job + "\n" + waiter)
}

// hashedChannel is the channel named by the MD5 of name.
func hashedChannel(name string) string {
	sum := md5.Sum([]byte(name))
	return "leasectl_" + hex.EncodeToString(sum[:])
}

// Subscribe starts delivering job's notifications to waiter (with waiter
// "", every notification of the job). It returns once the server confirmed
// the LISTEN, so that every one committed after it is delivered. ctx
// bounds only this call.
func (s *Store) Subscribe(ctx context.Context, job, waiter string) (leasestore.Subscription, error) {
	listen := "LISTEN " + quoteIdent(channel(s.ns, job))
	if waiter != "" {
		listen = s.listenInTurn(job, waiter)
	}
	sub := &subscription{released: make(chan struct{}, 1)}
	l, err := s.listen(ctx, &listener{
		listen:   listen,
		notified: func(*pgconn.Notification) { sub.wake() },
		// What was sent while the connection was down is lost: the waiter
		// looks for itself.
		up: func(first bool) {
			if !first {
				sub.wake()
			}
		},
	})
	if err != nil {
		return nil, s.unavailable("subscribe", err)
	}
	sub.l = l
	return sub, nil
}

// listenInTurn is the statement that listens for waiter's turn: on its own
// channel where the schema is at this leasectl's version, whose functions
// wake waiters in their turn (lib.sql, _wake_waiters), else on the job's
// channel, which every version's functions notify: on a schema that an
// older leasectl made (until this one migrates it), and whatever else keeps
// the version check from answering. The version is _check_version's, which
// every migration makes again with its functions, so that the channel
// follows the functions installed. One statement, run on every connection,
// so that the choice costs no round trip.
func (s *Store) listenInTurn(job, waiter string) string {
	return fmt.Sprintf("DO $leasectl$ BEGIN PERFORM %s._check_version(%d); LISTEN %s; "+
		"EXCEPTION WHEN OTHERS THEN LISTEN %s; END $leasectl$",
		quoteIdent(schemaName(s.ns)), schemaVersion, quoteIdent(waiterChannel(s.ns, job, waiter)), quoteIdent(channel(s.ns, job)))
}

// subscription turns the notifications of one channel into coalesced
// wake-ups.
type subscription struct {
	l        *listener
	released chan struct{}
}

// wake delivers one notification, coalescing with one not yet received.
func (sub *subscription) wake() {
	select {
	case sub.released <- struct{}{}:
	default:
	}
}

// Released receives a value after a release; values coalesce.
func (sub *subscription) Released() <-chan struct{} { return sub.released }

// Close stops the subscription and closes its connection. It is safe to
// call more than once.
func (sub *subscription) Close() error {
	sub.l.close()
	return nil
}

// listener is a connection of its own that listens on fixed channels, for
// a subscription or the token feed: one goroutine (run) waits for its
// notifications and reconnects whenever the connection is lost.
type listener struct {
	// listen is the LISTEN statements, sent on every connection.
	listen string
	// notified is called with every notification, from run.
	notified func(*pgconn.Notification)
	// up is called from run on every connection once it listens, before
	// any notification on it: first is true for the one Store.listen made.
	// May be nil.
	up func(first bool)
	// lost is called from run when the connection was lost, and with the
	// error of each reconnection that failed. May be nil.
	lost func(error)

	store  *Store
	cfg    *pgconn.Config
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns
	once   sync.Once
}

// listen connects l, whose listen and callbacks are set, listens and
// starts its goroutine. It returns once the
// server confirmed the LISTEN, so that every notification committed after
// it is delivered; ctx bounds only this call.
func (s *Store) listen(ctx context.Context, l *listener) (*listener, error) {
	l.store = s
	l.done = make(chan struct{})
	cfg := s.cfg.Copy()
	cfg.OnNotification = func(_ *pgconn.PgConn, n *pgconn.Notification) { l.notified(n) }
	l.cfg = cfg
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, err
	}
	var bg context.Context
	bg, l.cancel = context.WithCancel(context.Background())
	go l.run(bg, conn)
	return l, nil
}

// connect opens a connection and listens on the channels.
func (l *listener) connect(ctx context.Context) (*pgconn.PgConn, error) {
	conn, err := l.store.dial(ctx, l.cfg)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, l.listen).ReadAll(); err != nil {
		closeConn(conn)
		return nil, err
	}
	return conn, nil
}

// run waits for notifications until ctx ends, reconnecting whenever the
// connection is lost.
func (l *listener) run(ctx context.Context, conn *pgconn.PgConn) {
	defer close(l.done)
	for first := true; ; first = false {
		if l.up != nil {
			l.up(first)
		}
		err := waitNotifications(ctx, conn)
		closeConn(conn)
		if ctx.Err() != nil {
			return
		}
		if l.lost != nil {
			l.lost(err)
		}
		if conn = l.reconnect(ctx); conn == nil {
			return
		}
	}
}

// waitNotifications waits for notifications on conn until it fails or ctx ends, and
// returns why. The OnNotification callback delivers every notification,
// also those read while waiting here.
func waitNotifications(ctx context.Context, conn *pgconn.PgConn) error {
	for {
		if err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
	}
}

// reconnect connects again after jittered, doubling delays until it
// succeeds (it returns the connection) or ctx ends (nil).
func (l *listener) reconnect(ctx context.Context) *pgconn.PgConn {
	delay := reconnectFirst
	for {
		t := time.NewTimer(delay/2 + rand.N(delay/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		conn, err := l.connect(ctx)
		if err == nil {
			return conn
		}
		if l.lost != nil && ctx.Err() == nil {
			l.lost(err)
		}
		delay = min(2*delay, reconnectLast)
	}
}

// close stops the listener and closes its connection. It is safe to call
// more than once.
func (l *listener) close() {
	l.once.Do(func() {
		l.cancel()
		<-l.done
	})
}
