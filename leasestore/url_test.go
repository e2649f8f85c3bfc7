package leasestore

import (
	"net/url"
	"strings"
	"testing"
)

func TestParseLocation(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/state")
	tests := []struct {
		raw     string
		want    Location
		wantErr string
	}{
		{raw: "", want: Location{Kind: KindEmbedded, Dir: "/state/leasectl"}},
		{raw: "file:///var/lib/leasectl", want: Location{Kind: KindEmbedded, Dir: "/var/lib/leasectl"}},
		{raw: "redis://127.0.0.1:6380/2", want: Location{Kind: KindRedis, URL: "redis://127.0.0.1:6380/2"}},
		{raw: "rediss://app:s3cret@redis.example:6380", want: Location{Kind: KindRedis, URL: "rediss://app:s3cret@redis.example:6380"}},
		{raw: "file://relative/dir", wantErr: "local folder"},
		{raw: "redis://", wantErr: "no host"},
		{raw: "redis://h/x", wantErr: "database number"},
		{raw: "redis://u:s3cret@h/x", wantErr: "database number"},
		{raw: "http://h", wantErr: "unknown scheme"},
		{raw: "localhost:6379", wantErr: "unknown scheme"},
		{raw: "127.0.0.1", wantErr: "no scheme"},
	}
	for _, tt := range tests {
		got, err := ParseLocation(tt.raw)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseLocation(%q) error = %v, want it to mention %q", tt.raw, err, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Errorf("ParseLocation(%q) error leaks the password: %v", tt.raw, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseLocation(%q) = %+v, %v; want %+v", tt.raw, got, err, tt.want)
		}
	}
}

func TestParseLocationDefaultWithoutXDG(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "relative")
	t.Setenv("HOME", "/home/op")
	got, err := ParseLocation("")
	if err != nil || got.Dir != "/home/op/.local/state/leasectl" {
		t.Fatalf("ParseLocation(\"\") = %+v, %v; want ~/.local/state/leasectl", got, err)
	}
}

// FuzzParseLocation checks that no input panics and that a password never
// reaches an error message.
func FuzzParseLocation(f *testing.F) {
	for _, s := range []string{"", "redis://u:pw@h:1/0", "rediss://:pw@h", "file:///x", "redis://u:pw@h/%zz", "::", "redis://[::1]:6380"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		_, err := ParseLocation(raw)
		if err == nil {
			return
		}
		if strings.ContainsAny(err.Error(), "\n") {
			t.Fatalf("multi-line error: %q", err)
		}
		u, perr := url.Parse(raw)
		if perr != nil {
			return
		}
		if pw, ok := u.User.Password(); ok && len(pw) >= 4 && !strings.Contains(Redact(raw), pw) && strings.Contains(err.Error(), pw) {
			t.Fatalf("error %q contains the password %q", err, pw)
		}
	})
}
