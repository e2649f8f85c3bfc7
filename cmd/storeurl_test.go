package cmd

import (
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/redistest"
)

// TestBadStoreURLsExit64WithoutTheirSecret drives the built binary with
// store URLs a user gets wrong: each is a usage error (exit 64) whatever the
// command, never echoes the secret it carries, and says what to do where a
// hint helps.
func TestBadStoreURLsExit64WithoutTheirSecret(t *testing.T) {
	srv, err := redistest.Start(redistest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	const secret = "s3cretPW"
	tests := []struct {
		name, url, want string
	}{
		{"password as a query parameter", "redis://127.0.0.1:1/0?password=" + secret, "redis://:PASSWORD@"},
		{"username as a query parameter", "redis+cluster://127.0.0.1:1?username=app&password=" + secret, "redis://:PASSWORD@"},
		{"bad dial timeout", "redis://127.0.0.1:1/0?dial_timeout=abc", `invalid dial_timeout duration`},
		{"bad dial timeout with a password", "redis://:" + secret + "@127.0.0.1:1/0?dial_timeout=abc", "dial_timeout"},
		{"sentinel URL with a bad option", "redis://:" + secret + "@127.0.0.1:1?master_name=m&password=" + secret + "&dial_timeout=x", "dial_timeout"},
		{"# in the password", "redis://app:ab#" + secret + "@127.0.0.1:1/0", "percent-encode"},
		{"/ in the password", "redis://app:ab/" + secret + "@127.0.0.1:1/0", "%2F for /"},
		{"bare % in the password", "redis://app:" + secret + "%zz@127.0.0.1:1/0", "%25 for a literal %"},
		{"port not a number", "redis://127.0.0.1:abc/0", "invalid store URL redis://127.0.0.1:abc/0: the port must be a number"},
		{"port not a number, with a password", "redis://app:" + secret + "@127.0.0.1:notaport", "invalid store URL redis://app:xxxxx@127.0.0.1:notaport:"},
		{"etcd without endpoints", "etcd://", "invalid store URL etcd://: no endpoint"},
		{"PostgreSQL without anything", "postgres://", "invalid store URL postgres://:"},
		{"database the server does not have", srv.URL[:strings.LastIndex(srv.URL, "/")] + "/99", "database 99"},
		{"database not a number", "redis://127.0.0.1:1/x", "database"},
		{"no host", "redis:///0", "no host"},
		{"bad min_replicas", "rediss+cluster://:" + secret + "@127.0.0.1:1?min_replicas=x", "min_replicas"},
		{"unknown scheme", "ftp://:" + secret + "@127.0.0.1", `unknown scheme "ftp"`},
		{"no scheme", "127.0.0.1:6379", "no scheme"},
		{"file URL with a query", "file:///tmp/leasectl?password=" + secret, "no user or query"},
		{"relative file URL", "file:relative/dir", "absolute path"},
	}
	commands := [][]string{
		{"run", "--job", "j", "--", "true"},
		{"ls"},
		{"token", "check", "--job", "j", "--token", "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, args := range commands {
				res := leasectlBinary(t, append(userEnv(t), "LEASECTL_LOG_FORMAT=console"), append([]string{"--store", tt.url}, args...)...)
				if res.code != exitUsage {
					t.Errorf("%s: exit %d, want 64; stderr %q", args[0], res.code, res.stderr)
				}
				if strings.Contains(res.stderr, secret) {
					t.Errorf("%s: stderr echoes the secret: %q", args[0], res.stderr)
				}
				if !strings.Contains(res.stderr, tt.want) {
					t.Errorf("%s: stderr %q does not say %q", args[0], res.stderr, tt.want)
				}
				if lines := strings.Count(strings.TrimSpace(res.stderr), "\n") + 1; lines != 1 {
					t.Errorf("%s: %d lines on stderr, want one: %q", args[0], lines, res.stderr)
				}
			}
		})
	}
	t.Run("bad namespace", func(t *testing.T) {
		res := leasectlBinary(t, userEnv(t), "--namespace", "a b", "ls")
		if res.code != exitUsage || !strings.Contains(res.stderr, "invalid namespace") {
			t.Errorf("exit %d, stderr %q; want 64 naming the namespace", res.code, res.stderr)
		}
	})
}
