package pgstore

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasectl/leasectl/leasestore"
)

// Release notifications travel by LISTEN/NOTIFY: the functions that free a
// job (release, a counted crash, unquarantine) call pg_notify on the job's
// channel, which PostgreSQL delivers when their transaction commits, to
// every session listening on it then. A subscription is one connection of
// its own, listening on one channel.
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
	sum := md5.Sum([]byte(namespace + "\n" + job))
	return "leasectl_" + hex.EncodeToString(sum[:])
}

// Subscribe starts delivering job's release notifications. It returns once
// the server confirmed the LISTEN, so that every release committed after it
// is delivered. ctx bounds only this call.
func (s *Store) Subscribe(ctx context.Context, job string) (leasestore.Subscription, error) {
	sub := &subscription{
		store:    s,
		listen:   "LISTEN " + quoteIdent(channel(s.ns, job)),
		released: make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	cfg := s.cfg.Copy()
	cfg.OnNotification = func(*pgconn.PgConn, *pgconn.Notification) { sub.wake() }
	sub.cfg = cfg
	conn, err := sub.connect(ctx)
	if err != nil {
		return nil, s.unavailable("subscribe", err)
	}
	var bg context.Context
	bg, sub.cancel = context.WithCancel(context.Background())
	go sub.run(bg, conn)
	return sub, nil
}

// subscription turns the notifications of one channel into coalesced
// wake-ups.
type subscription struct {
	store    *Store
	cfg      *pgconn.Config
	listen   string
	released chan struct{}
	cancel   context.CancelFunc
	done     chan struct{} // closed when run returns
	once     sync.Once
}

// connect opens a connection and listens on the channel.
func (sub *subscription) connect(ctx context.Context) (*pgconn.PgConn, error) {
	conn, err := sub.store.dial(ctx, sub.cfg)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, sub.listen).ReadAll(); err != nil {
		closeConn(conn)
		return nil, err
	}
	return conn, nil
}

// wake delivers one notification, coalescing with one not yet received.
func (sub *subscription) wake() {
	select {
	case sub.released <- struct{}{}:
	default:
	}
}

// run waits for notifications until ctx ends, reconnecting whenever the
// connection is lost.
func (sub *subscription) run(ctx context.Context, conn *pgconn.PgConn) {
	defer close(sub.done)
	for {
		// The OnNotification callback delivers every notification, also
		// those read while waiting here.
		err := conn.WaitForNotification(ctx)
		if err == nil {
			continue
		}
		closeConn(conn)
		if conn = sub.reconnect(ctx); conn == nil {
			return
		}
		// What was sent while the connection was down is lost: the waiter
		// looks for itself.
		sub.wake()
	}
}

// reconnect connects again after jittered, doubling delays until it
// succeeds (it returns the connection) or ctx ends (nil).
func (sub *subscription) reconnect(ctx context.Context) *pgconn.PgConn {
	delay := reconnectFirst
	for {
		t := time.NewTimer(delay/2 + rand.N(delay/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		if conn, err := sub.connect(ctx); err == nil {
			return conn
		}
		delay = min(2*delay, reconnectLast)
	}
}

// Released receives a value after a release; values coalesce.
func (sub *subscription) Released() <-chan struct{} { return sub.released }

// Close stops the subscription and closes its connection. It is safe to
// call more than once.
func (sub *subscription) Close() error {
	sub.once.Do(func() {
		sub.cancel()
		<-sub.done
	})
	return nil
}
