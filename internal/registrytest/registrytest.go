// Package registrytest serves a registry (package registry) in the test's
// own process, over TLS with certificates made for the test, on a free
// loopback port, and opens remote stores (leasestore/httpstore) on it. It
// is imported only by tests.
package registrytest

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/internal/testcert"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/httpstore"
	"github.com/leasectl/leasectl/registry"
)

// Tokens of a test registry, one per role.
const (
	WorkerToken   = "worker-token-0123456789abcdef"
	OperatorToken = "operator-token-0123456789abcdef"
	ReaderToken   = "reader-token-0123456789abcdef"
)

// TokensFile is a tokens file holding the three tokens.
const TokensFile = "# test tokens\nworker " + WorkerToken + "\noperator " + OperatorToken + "\nreader " + ReaderToken + "\n"

// Registry is a registry serving for one test.
type Registry struct {
	// URL is https://127.0.0.1:PORT.
	URL string
	// Certs are the test's certificates; Certs.CA signed the server's.
	Certs testcert.Files

	store     *leasestore.Store
	namespace string
	addr      string
	tlsConf   *registry.TLS
	stop      func() error // nil while stopped
}

// Start serves store, under namespace, until t ends.
func Start(t testing.TB, store *leasestore.Store, namespace string) *Registry {
	t.Helper()
	certs, err := testcert.Generate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tlsConf, err := registry.LoadTLS(registry.TLSFiles{Cert: certs.ServerCert, Key: certs.ServerKey})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Registry{URL: "https://" + ln.Addr().String(), Certs: certs, store: store, namespace: namespace,
		addr: ln.Addr().String(), tlsConf: tlsConf}
	r.serve(t, ln)
	t.Cleanup(func() { r.Stop(t) })
	return r
}

// serve serves a new registry on ln.
func (r *Registry) serve(t testing.TB, ln net.Listener) {
	t.Helper()
	tokens, err := registry.ParseTokens(strings.NewReader(TokensFile), "test tokens")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := registry.New(registry.Config{Store: r.store, Namespace: r.namespace, Tokens: tokens, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, r.tlsConf) }()
	r.stop = func() error {
		cancel()
		return <-done
	}
}

// Stop shuts the registry down as SIGTERM would (long-polls are answered
// shutting_down); the store stays open. Stopping a stopped registry does
// nothing.
func (r *Registry) Stop(t testing.TB) {
	t.Helper()
	if r.stop == nil {
		return
	}
	if err := r.stop(); err != nil {
		t.Errorf("registry: %v", err)
	}
	r.stop = nil
}

// Resume serves again on the same address after Stop, with a new registry
// process's memory: no subscription or token watch of the last one.
func (r *Registry) Resume(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", r.addr, err)
	}
	r.serve(t, ln)
}

// Open opens a remote store on r for namespace with token, trusting r's CA;
// it is closed when t ends.
func (r *Registry) Open(t testing.TB, namespace, token string) *httpstore.Store {
	t.Helper()
	s, err := httpstore.Open(r.URL, namespace, httpstore.Options{Token: token, CAFile: r.Certs.CA})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
