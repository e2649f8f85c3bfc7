package pgstore

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// sslRequestCode is the SSLRequest message's code (PostgreSQL's protocol,
// "SSLRequest": 1234 in the high 16 bits, 5679 in the low 16).
const sslRequestCode = 80877103

// preferTLS recognises sslmode=prefer (libpq's default) on one TCP host,
// which pgconn parses into two attempts: TLS, then plain text on a new
// connection. Against a server without TLS, the first attempt costs a
// connection and a backend that the postmaster forks only to answer "no"
// (docs/postgres.md, Where a run goes). libpq goes on in plain text on the
// same connection instead. preferTLS makes cfg's first
// attempt plain and returns its TLS configuration, for negotiatingDial to
// do what libpq does; it returns nil, leaving cfg alone, for any other
// sslmode or for several hosts.
//
// Only with sslcertmode=allow (the default): pgconn prepares the TLS
// configuration of the other modes itself, when it starts TLS, to withhold
// or require a client certificate. And because pgconn does not know that
// the connection is TLS, a CancelRequest would reach the server in plain
// text; the store sends none (calls end by their deadlines).
func preferTLS(cfg *pgconn.Config) *tls.Config {
	if cfg.TLSConfig == nil || len(cfg.Fallbacks) != 1 || cfg.SSLNegotiation == "direct" || cfg.SSLCertMode != "allow" {
		return nil
	}
	plain := cfg.Fallbacks[0]
	if plain.TLSConfig != nil || plain.Host != cfg.Host || plain.Port != cfg.Port {
		return nil
	}
	t := cfg.TLSConfig
	cfg.TLSConfig = nil
	return t
}

// negotiatingDial wraps dial for one connect of a config that preferTLS
// changed. The first connection that reaches the server asks it for TLS:
// on yes the connection goes on over TLS with tlsConfig, on no in plain
// text. Later connections, pgconn's plain attempt after a failed first
// one (the request itself failing, as with a proxy that drops it, a TLS
// handshake or an authentication refused), stay plain, as libpq's prefer
// does. pgconn makes its attempts one after the other, so the closure
// needs no lock.
func negotiatingDial(dial pgconn.DialFunc, tlsConfig *tls.Config) pgconn.DialFunc {
	asked := false
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil || asked {
			return conn, err
		}
		asked = true
		yes, err := requestTLS(ctx, conn)
		if err != nil {
			conn.Close()
			return nil, err
		}
		if yes {
			return tls.Client(conn, tlsConfig), nil
		}
		return conn, nil
	}
}

// requestTLS sends conn's server an SSLRequest and reports whether it
// agreed to TLS, within ctx.
func requestTLS(ctx context.Context, conn net.Conn) (bool, error) {
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	msg := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 8), sslRequestCode)
	var answer [1]byte
	_, err := conn.Write(msg)
	if err == nil {
		_, err = io.ReadFull(conn, answer[:])
	}
	if !stop() {
		return false, fmt.Errorf("asking for TLS: %w", ctx.Err())
	}
	if err != nil {
		return false, fmt.Errorf("asking for TLS: %w", err)
	}
	switch answer[0] {
	case 'S':
		return true, nil
	case 'N':
		return false, nil
	}
	return false, errors.New("asking for TLS: the server answered neither yes nor no")
}
