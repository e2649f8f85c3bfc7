package cmd

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
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/internal/testenv"
)

// TestTLSMismatchFailsFastNamingTLS points TLS at a plain Redis and plain
// text at a TLS Redis: each command fails at once (exit 69) with one line
// that names TLS and what to change, instead of hanging until a deadline it
// then blames. A certificate the client does not trust is named too, and
// rediss:// to a TLS port works.
func TestTLSMismatchFailsFastNamingTLS(t *testing.T) {
	if _, err := testenv.Leasectl(); err != nil { // built before anything is timed
		t.Fatal(err)
	}
	plain, err := redistest.Start(redistest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plain.Stop() })
	tlsAddr := startTLSRedis(t)

	// The handshake is bounded by 2 s (redisstore's tlsHandshakeTimeout);
	// before it was, a run took two 5 s dial timeouts. The bound only tells
	// the two apart on a loaded machine.
	const fast = 5 * time.Second
	tests := []struct {
		name, url string
		want      []string
	}{
		{"rediss:// to a plain port", "rediss://" + plain.Addr + "/0", []string{"TLS handshake with Redis at " + plain.Addr + " failed", "plain-text port", "redis://"}},
		{"redis:// to a TLS port", "redis://" + tlsAddr + "/0", []string{"closed the connection", "rediss://"}},
		{"a certificate nobody signed", "rediss://" + tlsAddr + "/0", []string{"TLS handshake with Redis at " + tlsAddr + " failed", "certificate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, args := range [][]string{{"run", "--job", "j", "--", "true"}, {"ls"}} {
				start := time.Now()
				res := leasectlBinary(t, userEnv(t), append([]string{"--store", tt.url}, args...)...)
				took := time.Since(start)
				if res.code != exitUnavailable {
					t.Errorf("%s: exit %d, want 69; stderr %q", args[0], res.code, res.stderr)
				}
				for _, w := range tt.want {
					if !strings.Contains(res.stderr, w) {
						t.Errorf("%s: stderr %q does not say %q", args[0], res.stderr, w)
					}
				}
				if strings.Contains(res.stderr, "safety") || strings.Count(strings.TrimSpace(res.stderr), "\n") > 0 {
					t.Errorf("%s: want one line that does not blame --safety, got %q", args[0], res.stderr)
				}
				if took > fast {
					t.Errorf("%s took %s, want under %s", args[0], took.Round(time.Millisecond), fast)
				}
				t.Logf("%s took %s: %s", args[0], took.Round(time.Millisecond), res.stderr)
			}
		})
	}
	t.Run("rediss:// to a TLS port", func(t *testing.T) {
		res := leasectlBinary(t, userEnv(t), "--store", "rediss://"+tlsAddr+"/0?skip_verify=true", "run", "--job", "j", "--", "true")
		if res.code != 0 {
			t.Errorf("exit %d, stderr %q; want 0", res.code, res.stderr)
		}
	})
}

// startTLSRedis starts a redis-server that also listens for TLS, with a
// self-signed certificate for 127.0.0.1, and returns the TLS address.
func startTLSRedis(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "leasectl test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv, err := redistest.Start(redistest.Options{Args: []string{
		"--tls-port", strconv.Itoa(port), "--tls-cert-file", cert, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", cert, "--tls-auth-clients", "no",
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
