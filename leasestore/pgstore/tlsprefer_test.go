package pgstore

import (
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasectl/leasectl/internal/pgtest"
	"github.com/leasectl/leasectl/internal/testcert"
	"github.com/leasectl/leasectl/internal/testserver"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// Only sslmode=prefer on one TCP host is asked on the connection itself;
// every other URL keeps pgconn's attempts as parsed.
func TestPreferTLSOnlyForPreferOnOneHost(t *testing.T) {
	t.Setenv("PGSSLMODE", "")
	for _, tc := range []struct {
		url    string
		prefer bool
	}{
		{"postgres://u@db.internal/ops", true},
		{"postgres://u@db.internal/ops?sslmode=prefer", true},
		{"postgres://u@db.internal/ops?sslmode=prefer&sslrootcert=" + writeCA(t), true},
		{"postgres://u@db.internal/ops?sslmode=disable", false},
		{"postgres://u@db.internal/ops?sslmode=allow", false},
		{"postgres://u@db.internal/ops?sslmode=require", false},
		{"postgres://u@db.internal/ops?sslmode=verify-full", false},
		{"postgres://u@db.internal/ops?sslmode=prefer&sslnegotiation=direct", false},
		{"postgres://u@db1.internal,db2.internal/ops?sslmode=prefer", false},
		{"postgres://u@/ops?host=/var/run/postgresql", false},
		{"postgres://u@db.internal/ops?sslmode=prefer&sslcertmode=allow", true},
		{"postgres://u@db.internal/ops?sslmode=prefer&sslcertmode=disable", false},
		{"postgres://u@db.internal/ops?sslmode=prefer&sslcertmode=require", false},
	} {
		cfg, err := pgconn.ParseConfig(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		hadTLS := cfg.TLSConfig != nil
		got := preferTLS(cfg)
		if (got != nil) != tc.prefer {
			t.Errorf("%s: preferTLS made a configuration: %v, want %v", tc.url, got != nil, tc.prefer)
		}
		if tc.prefer && cfg.TLSConfig != nil {
			t.Errorf("%s: the first attempt still starts TLS itself", tc.url)
		}
		if !tc.prefer && (cfg.TLSConfig != nil) != hadTLS {
			t.Errorf("%s: the configuration changed", tc.url)
		}
	}
}

// writeCA writes a CA certificate for a URL's sslrootcert.
func writeCA(t *testing.T) string {
	t.Helper()
	files, err := testcert.Generate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return files.CA
}

// The first connection asks for TLS and goes on over TLS when the server
// agrees, in plain text on the same connection when it refuses; the next
// connection of the same connect, pgconn's plain attempt, does not ask,
// also when the request itself failed (the server answered an error, or a
// proxy closed the connection on it).
func TestNegotiatingDialAsksOnce(t *testing.T) {
	files, err := testcert.Generate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(files.ServerCert, files.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	const closes = 'X' // no answer: the connection is closed
	for _, answer := range []byte{'S', 'N', 'E', closes} {
		refused := answer == 'E' || answer == closes
		t.Run(string(answer), func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			// Each connection's first 8 bytes: an SSLRequest, or the
			// plain "startup" that the client writes next.
			got := make(chan string, 2)
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					var first [8]byte
					if _, err := io.ReadFull(c, first[:]); err != nil {
						c.Close()
						return
					}
					if binary.BigEndian.Uint32(first[4:]) != sslRequestCode {
						got <- "plain " + string(first[:])
						c.Close()
						continue
					}
					if refused {
						if answer == 'E' {
							c.Write([]byte{answer})
						}
						c.Close()
						continue
					}
					c.Write([]byte{answer})
					var rest net.Conn = c
					if answer == 'S' {
						rest = tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
					}
					msg := make([]byte, 7)
					if _, err := io.ReadFull(rest, msg); err != nil {
						got <- "after the request: " + err.Error()
					} else {
						got <- "after the request: " + string(msg)
					}
					rest.Close()
				}
			}()
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			cfg, err := pgconn.ParseConfig("postgres://u@127.0.0.1:" + port + "/db?sslmode=prefer")
			if err != nil {
				t.Fatal(err)
			}
			dial := negotiatingDial(cfg.DialFunc, preferTLS(cfg))
			for i, want := range []string{"after the request: startup", "plain startup!"} {
				conn, err := dial(t.Context(), "tcp", ln.Addr().String())
				if i == 0 && refused {
					if err == nil {
						t.Fatal("dial 1: no error from a failed TLS request")
					}
					continue
				}
				if err != nil {
					t.Fatalf("dial %d: %v", i+1, err)
				}
				if _, isTLS := conn.(*tls.Conn); isTLS != (answer == 'S' && i == 0) {
					t.Errorf("dial %d: TLS = %v", i+1, isTLS)
				}
				msg := "startup"
				if i > 0 {
					msg = "startup!"
				}
				if _, err := conn.Write([]byte(msg)); err != nil {
					t.Fatalf("dial %d: write: %v", i+1, err)
				}
				if g := <-got; g != want {
					t.Errorf("dial %d: the server read %q, want %q", i+1, g, want)
				}
				conn.Close()
			}
		})
	}
}

// countingProxy forwards TCP connections to target, counting them and
// those that start with an SSLRequest.
type countingProxy struct {
	ln       net.Listener
	conns    atomic.Int64
	requests atomic.Int64
	wg       sync.WaitGroup
}

func startCountingProxy(t *testing.T, target string) *countingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{ln: ln}
	var open []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.conns.Add(1)
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			open = append(open, c, s)
			mu.Unlock()
			p.wg.Add(2)
			go func() {
				defer p.wg.Done()
				var first [8]byte
				if _, err := io.ReadFull(c, first[:]); err == nil {
					if binary.BigEndian.Uint32(first[4:]) == sslRequestCode {
						p.requests.Add(1)
					}
					if _, err := s.Write(first[:]); err == nil {
						io.Copy(s, c)
					}
				}
				s.Close()
			}()
			go func() { defer p.wg.Done(); io.Copy(c, s); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// preferThroughProxy starts a counting proxy in front of srv and returns
// it with a URL through it, with sslmode=prefer.
func preferThroughProxy(t *testing.T, srv *pgtest.Server) (*countingProxy, string) {
	t.Helper()
	addr := net.JoinHostPort(srv.Host, strconv.Itoa(srv.Port))
	proxy := startCountingProxy(t, addr)
	u, err := url.Parse(srv.PreferURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Host = proxy.ln.Addr().String()
	return proxy, u.String()
}

// Against a server without TLS, sslmode=prefer asks for TLS and goes on
// in plain text on the same connection, rather than opening another.
func TestPreferWithoutTLSConnectsOnce(t *testing.T) {
	srv := testPG.Get(t)
	proxy, storeURL := preferThroughProxy(t, srv)
	storetest.Acquire(t, openPG(t, storeURL, freshNamespace()), storetest.Request("job", "w1", storetest.LongTTL))
	if n, asked := proxy.conns.Load(), proxy.requests.Load(); n != 1 || asked != 1 {
		t.Errorf("%d connections, %d of them asking for TLS; want 1 asking", n, asked)
	}
}

// Against a server with TLS, sslmode=prefer asks once and goes on over TLS
// on that connection: the store's backend is a TLS one.
func TestPreferWithTLSGoesOnOverTLS(t *testing.T) {
	srv, err := pgtest.Start(pgtest.Options{TLS: true})
	srv = testserver.Own(t, srv, err)
	proxy, storeURL := preferThroughProxy(t, srv)
	storetest.Acquire(t, openPG(t, storeURL, freshNamespace()), storetest.Request("job", "w1", storetest.LongTTL))
	if n, asked := proxy.conns.Load(), proxy.requests.Load(); n != 1 || asked != 1 {
		t.Errorf("%d connections, %d of them asking for TLS; want 1 asking", n, asked)
	}
	rows, err := srv.Query("SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = " +
		pgtest.QuoteLiteral(defaultApplicationName))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0][0] != "t" {
		t.Errorf("the store's backends' TLS: %v, want one, over TLS", rows)
	}
}
