package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/testcert"
	"github.com/leasectl/leasectl/registry/api"
)

// served is a registry served by Serve on a loopback port.
type served struct {
	srv    *testServer
	addr   string
	cancel context.CancelFunc
	done   chan error
}

// serveTLS serves store with Serve over TLS (certs), until stop or the end
// of the test.
func serveTLS(t *testing.T, store *fakeStore, tlsConf *TLS) *served {
	t.Helper()
	ts := newTestServer(t, store, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{srv: ts, addr: ln.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- ts.Serve(ctx, ln, tlsConf) }()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

// client trusts the CA in caFile and presents cert, if any.
func client(t *testing.T, caFile string, cert *tls.Certificate) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	conf := &tls.Config{RootCAs: pool}
	if cert != nil {
		conf.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: conf, ForceAttemptHTTP2: true}, Timeout: 20 * time.Second}
}

func get(c *http.Client, url, token string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return resp, err
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certs, err := testcert.Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	tlsConf, err := LoadTLS(TLSFiles{Cert: certs.ServerCert, Key: certs.ServerKey})
	if err != nil {
		t.Fatal(err)
	}
	s := serveTLS(t, newFakeStore(t), tlsConf)
	url := "https://" + s.addr + api.PathCounts

	resp, err := get(client(t, certs.CA, nil), url, readerToken)
	if err != nil || resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("a client trusting the CA: %v %v, want 200 over HTTP/2", resp, err)
	}
	if _, err := get(client(t, certs.OtherCA, nil), url, readerToken); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client trusting another CA: %v, want a certificate error", err)
	}

	// A SIGHUP's reload: new certificates from another CA, at the same
	// paths, serve new connections.
	oldCA := dir + "/old-ca.pem"
	if pem, err := os.ReadFile(certs.CA); err != nil || os.WriteFile(oldCA, pem, 0o600) != nil {
		t.Fatal("keeping the old CA:", err)
	}
	renewed, err := testcert.Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := tlsConf.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := get(client(t, oldCA, nil), url, readerToken); err == nil {
		t.Error("after Reload, a client trusting only the replaced CA was served")
	}
	if resp, err := get(client(t, renewed.CA, nil), url, readerToken); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("a client trusting the new CA after Reload: %v %v", resp, err)
	}
	if err := os.WriteFile(certs.ServerKey, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := tlsConf.Reload(); err == nil || !strings.Contains(err.Error(), certs.ServerKey) {
		t.Errorf("Reload of a broken key: %v, want an error naming the file", err)
	}
	if resp, err := get(client(t, renewed.CA, nil), url, readerToken); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("after a failed Reload, the configuration in use must stay: %v %v", resp, err)
	}
}

func TestClientCertificates(t *testing.T) {
	certs, err := testcert.Generate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tlsConf, err := LoadTLS(TLSFiles{Cert: certs.ServerCert, Key: certs.ServerKey, ClientCA: certs.CA})
	if err != nil {
		t.Fatal(err)
	}
	s := serveTLS(t, newFakeStore(t), tlsConf)
	url := "https://" + s.addr + api.PathCounts
	if _, err := get(client(t, certs.CA, nil), url, readerToken); err == nil {
		t.Error("a client without a certificate was served")
	}
	cert, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := get(client(t, certs.CA, &cert), url, readerToken)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a client with a certificate of the CA: %v %v", resp, err)
	}
	if resp, err := get(client(t, certs.CA, &cert), url, "a-certificate-is-not-a-token"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a certificate without a good token: %v %v, want 401", resp, err)
	}
	if !strings.Contains(s.srv.log.String(), `"client_cert":"test-client"`) {
		t.Errorf("the access log does not name the client certificate:\n%s", s.srv.log)
	}
}

// A shutdown lets a request in progress finish, then Serve returns nil.
func TestGracefulShutdown(t *testing.T) {
	certs, err := testcert.Generate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tlsConf, err := LoadTLS(TLSFiles{Cert: certs.ServerCert, Key: certs.ServerKey})
	if err != nil {
		t.Fatal(err)
	}
	store := newFakeStore(t)
	release := make(chan struct{})
	store.entered = make(chan string, 1)
	store.hold["status"] = release
	s := serveTLS(t, store, tlsConf)

	answered := make(chan *http.Response, 1)
	go func() {
		resp, err := get(client(t, certs.CA, nil), "https://"+s.addr+api.PathStatus+"j", readerToken)
		if err != nil {
			t.Errorf("the request in progress at shutdown: %v", err)
		}
		answered <- resp
	}()
	<-store.entered
	s.cancel()
	// Serve is shutting down while the store call is held.
	select {
	case err := <-s.done:
		t.Fatalf("Serve returned (%v) before the request in progress was answered", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if resp := <-answered; resp == nil || resp.StatusCode != http.StatusOK {
		t.Errorf("the request in progress at shutdown: %v, want 200", resp)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("Serve after a graceful shutdown: %v", err)
		}
		s.done <- nil // for the cleanup
	case <-time.After(ShutdownGrace + 5*time.Second):
		t.Fatal("Serve did not return after the shutdown")
	}
}
