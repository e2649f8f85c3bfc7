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
}

// Start serves store, under namespace, until t ends.
func Start(t testing.TB, store leasestore.Store, namespace string) *Registry {
	t.Helper()
	certs, err := testcert.Generate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := registry.ParseTokens(strings.NewReader(TokensFile), "test tokens")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := registry.New(registry.Config{Store: store, Namespace: namespace, Tokens: tokens, Log: zerolog.Nop()})
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, tlsConf) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("registry: %v", err)
		}
	})
	return &Registry{URL: "https://" + ln.Addr().String(), Certs: certs}
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
