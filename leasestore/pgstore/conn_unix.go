//go:build unix

package pgstore

import (
	"context"
	"crypto/tls"
	"errors"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// alive reports whether an idle pooled connection can still carry a call:
// nothing is pending on its socket. An idle connection receives nothing
// unless its server is going away: a terminated backend
// (pg_terminate_backend, a restart) sends an error and closes. Peeking
// without blocking costs a system call, not a round trip, so a call never
// goes out on a connection already known dead, whose failure would leave
// the caller unsure whether it was carried out.
//
// pgconn reads in the background while a write is slow to drain (a busy
// server), and that read stays blocked on the idle socket afterwards;
// SyncConn ends it, with a round trip in that case alone, before the peek.
func alive(ctx context.Context, c *pgconn.PgConn) bool {
	if c.IsClosed() || c.SyncConn(ctx) != nil {
		return false
	}
	nc := c.Conn()
	if t, ok := nc.(*tls.Conn); ok {
		nc = t.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var peekErr error
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, peekErr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	})
	// EAGAIN: nothing to read, the connection is idle as it should be.
	// Anything else, end of stream or pending bytes or an error, means it
	// is going away.
	return err == nil && (errors.Is(peekErr, syscall.EAGAIN) || errors.Is(peekErr, syscall.EWOULDBLOCK))
}
