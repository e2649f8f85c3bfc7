package redisstore

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// tlsHandshakeTimeout bounds a TLS handshake on its own, within the
// caller's deadline. A plain-text Redis answers a TLS ClientHello with
// nothing (it waits for the rest of what it takes for an inline command),
// so without this bound a rediss:// URL pointed at a plain port would hang
// for the caller's whole deadline (for run, --safety, asked twice) and then
// blame the deadline. Two seconds cover a handshake's two round trips on a
// slow link (500 ms) with room to spare; longer would only delay the
// message that names the mistake.
const tlsHandshakeTimeout = 2 * time.Second

// defaultDialTimeout is go-redis's own, for URLs that set none.
const defaultDialTimeout = 5 * time.Second

// TLSError means the TLS handshake with a Redis server failed: the server
// does not speak TLS on that port, or its certificate was refused.
type TLSError struct {
	Addr string
	Err  error
}

// Error names the server and why the handshake failed.
func (e *TLSError) Error() string {
	return fmt.Sprintf("TLS handshake with Redis at %s failed: %v", e.Addr, e.Err)
}

// Unwrap returns the cause.
func (e *TLSError) Unwrap() error { return e.Err }

// errNoTLSAnswer is the cause of a handshake that got no answer in time.
var errNoTLSAnswer = fmt.Errorf("no TLS answer within %s: is it a plain-text port? (rediss:// speaks TLS, redis:// does not)", tlsHandshakeTimeout)

// tlsDialer returns a go-redis dialer that connects as go-redis's own does
// and then completes the TLS handshake within tlsHandshakeTimeout,
// reporting a failure as a *TLSError. (go-redis's own TLS dialer leaves the
// handshake to the dial timeout and reports it as a plain timeout.)
func tlsDialer(cfg *tls.Config, dialTimeout time.Duration) func(context.Context, string, string) (net.Conn, error) {
	if dialTimeout <= 0 {
		dialTimeout = defaultDialTimeout
	}
	dial := redis.NewDialer(&redis.Options{DialTimeout: dialTimeout})
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		if c.ServerName == "" {
			c.ServerName, _, _ = net.SplitHostPort(addr)
		}
		conn := tls.Client(raw, c)
		hctx, cancel := context.WithTimeout(ctx, tlsHandshakeTimeout)
		defer cancel()
		if err := conn.HandshakeContext(hctx); err != nil {
			raw.Close()
			if ctx.Err() != nil {
				return nil, ctx.Err() // the caller's deadline, not the handshake's
			}
			if hctx.Err() != nil {
				err = errNoTLSAnswer
			}
			return nil, &TLSError{Addr: addr, Err: err}
		}
		return conn, nil
	}
}
