package cmd

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/internal/testcert"
	"github.com/leasectl/leasectl/internal/testenv"
	"github.com/leasectl/leasectl/internal/testproc"
	"github.com/leasectl/leasectl/internal/testserver"
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
	plain = testserver.Own(t, plain, err)
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
// certificate for 127.0.0.1 from a CA the client does not know, and returns
// the TLS address.
func startTLSRedis(t *testing.T) string {
	t.Helper()
	certs, err := testcert.Generate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := redistest.Start(redistest.Options{Args: []string{
		"--tls-port", strconv.Itoa(port), "--tls-cert-file", certs.ServerCert, "--tls-key-file", certs.ServerKey,
		"--tls-ca-cert-file", certs.CA, "--tls-auth-clients", "no",
	}})
	testserver.Own(t, srv, err)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
