package registry

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/leasectl/leasectl/registry/api"
)

// Timeouts of the HTTP server. A slow or stalled client is cut off: its
// headers must arrive within readHeaderTimeout and its whole request within
// readTimeout; an answer, a long-poll's included, must be written within
// writeTimeout. Connections idle longer than idleTimeout are closed.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 15 * time.Second
	writeTimeout      = api.MaxPollTimeoutMS*time.Millisecond + 15*time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 32 << 10
)

// ShutdownGrace bounds a graceful shutdown: requests in progress get this
// long to finish (long-polls are answered at once) before their
// connections are closed. Within systemd's default stop timeout.
const ShutdownGrace = 10 * time.Second

// Serve answers requests on ln (with TLS when t is not nil) until ctx is
// done, then shuts down gracefully: /healthz fails, long-polls are
// answered shutting_down, new connections are refused, and requests in
// progress get ShutdownGrace to finish. It returns nil after a graceful
// shutdown, or the error that stopped serving.
func (s *Server) Serve(ctx context.Context, ln net.Listener, t *TLS) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		// TLS handshake failures and the like, at debug level: a port
		// scanner must not fill the log.
		ErrorLog: log.New(debugWriter{s}, "", 0),
	}
	sweepCtx, stopSweep := context.WithCancel(context.Background())
	defer stopSweep()
	go s.sweep(sweepCtx)

	done := make(chan error, 1)
	go func() {
		var err error
		if t != nil {
			srv.TLSConfig = t.serverConfig()
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		done <- err
	}()
	select {
	case err := <-done:
		s.Close()
		return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.Drain()
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	err := srv.Shutdown(sctx)
	s.Close()
	if errors.Is(err, context.DeadlineExceeded) {
		s.cfg.Log.Warn().Dur("grace", ShutdownGrace).Msg("requests still in progress after the grace period; their connections are closed")
		return srv.Close()
	}
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	return err
}

// debugWriter writes the HTTP server's own messages to the log at debug
// level.
type debugWriter struct{ s *Server }

func (w debugWriter) Write(p []byte) (int, error) {
	w.s.cfg.Log.Debug().Msg(string(trimNewline(p)))
	return len(p), nil
}

func trimNewline(p []byte) []byte {
	if n := len(p); n > 0 && p[n-1] == '\n' {
		return p[:n-1]
	}
	return p
}
