package etcdstore

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/etcdtest"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// testCA is a throw-away certificate authority that signs the test's
// server and client certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
	File string // the CA certificate, PEM
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{cert: cert, key: key, dir: dir, File: filepath.Join(dir, name+".pem")}
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// issue writes a certificate for 127.0.0.1 signed by ca, good for usage,
// and its key, and returns their paths.
func (ca *testCA) issue(t *testing.T, name string, usage ...x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(ca.dir, name+".pem"), filepath.Join(ca.dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kb)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestEtcdTLS runs a member that serves TLS and requires client
// certificates: an etcds:// URL with the CA, certificate and key works; a
// wrong CA or no certificate is refused as unavailable.
func TestEtcdTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "ca")
	// etcd's gateway reaches its own gRPC server with the member's
	// certificate: it must be good for client authentication too.
	serverCert, serverKey := ca.issue(t, "server", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	clientCert, clientKey := ca.issue(t, "client", x509.ExtKeyUsageClientAuth)
	c, err := etcdtest.Start(etcdtest.Options{TLS: &etcdtest.TLS{
		CertFile: serverCert, KeyFile: serverKey, ClientCAFile: ca.File,
		ClientCertFile: clientCert, ClientKeyFile: clientKey,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	base := "etcds://" + c.Endpoints()

	t.Run("CA, certificate and key in the URL", func(t *testing.T) {
		s := openEtcd(t, base+"?ca="+ca.File+"&cert="+clientCert+"&key="+clientKey, freshNamespace())
		l := storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
		storetest.Release(t, s, l, leasestore.ResultCompleted)
	})
	t.Run("files from the environment", func(t *testing.T) {
		t.Setenv(EnvCA, ca.File)
		t.Setenv(EnvCert, clientCert)
		t.Setenv(EnvKey, clientKey)
		s := openEtcd(t, base, freshNamespace())
		storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
	})
	t.Run("members not signed by the CA", func(t *testing.T) {
		other := newTestCA(t, t.TempDir(), "other")
		s := openEtcd(t, base+"?ca="+other.File+"&cert="+clientCert+"&key="+clientKey, freshNamespace())
		_, err := s.Acquire(call(t, storetest.HangGuard), storetest.Request("job", "w1", storetest.LongTTL))
		storetest.WantUnavailable(t, err, "the certificate of etcd at "+c.Endpoints()+" is not trusted")
	})
	t.Run("no client certificate", func(t *testing.T) {
		s := openEtcd(t, base+"?ca="+ca.File, freshNamespace())
		_, err := s.Acquire(call(t, storetest.HangGuard), storetest.Request("job", "w1", storetest.LongTTL))
		storetest.WantUnavailable(t, err, "refused the TLS handshake")
	})
}
