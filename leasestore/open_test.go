package leasestore

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
)

// opened records what the test driver's Opener was called with.
type opened struct {
	Driver
	u  *url.URL
	ns string
}

func (*opened) Limits() Limits { return Limits{MaxSlots: 1} }

func init() {
	Register("test", func(_ context.Context, u *url.URL, ns string) (Driver, error) { return &opened{u: u, ns: ns}, nil })
	Register(DefaultScheme, func(_ context.Context, u *url.URL, ns string) (Driver, error) {
		return &opened{u: u, ns: ns}, nil
	})
}

func TestOpenPicksTheDriverByScheme(t *testing.T) {
	s, err := Open(t.Context(), "test://u:pw@host:1/x?y=z", "ns")
	if err != nil {
		t.Fatal(err)
	}
	if o := s.Driver().(*opened); o.u.Host != "host:1" || o.u.Path != "/x" || o.ns != "ns" {
		t.Errorf("driver got %v in %q", o.u, o.ns)
	}
	s, err = Open(t.Context(), "", "ns")
	if err != nil {
		t.Fatal(err)
	}
	if o := s.Driver().(*opened); o.u.Scheme != DefaultScheme || o.u.Path != "" {
		t.Errorf("an empty URL opened %v, want the default scheme with an empty path", o.u)
	}
}

func TestOpenRefusals(t *testing.T) {
	tests := []struct{ raw, ns, want string }{
		{"nope://u:s3cret@h", "ns", `unknown scheme "nope" (use file://, test://)`},
		{"redis://u:s3cret@h:6379", "ns", `no driver for redis:// is linked in: import _ "github.com/leasectl/leasectl/leasestore/redisstore"`},
		{"etcds://h:2379", "ns", `import _ "github.com/leasectl/leasectl/leasestore/etcdstore"`},
		{"127.0.0.1:6379", "ns", "no scheme (use file://, test://)"},
		{"localhost", "ns", "no scheme"},
		{"test://u:s3cret@h/%zz", "ns", "%25 for a literal %"},
		{"test://u:s3#cret@h", "ns", "%23 for #"},
		{"test://h:port", "ns", "the port must be a number"},
		{"test://h:1/\x7f", "ns", "not a URL"},
		{"test://h", "", "must be 1 to 64 bytes"},
		{"test://h", "a b", `character ' ' at byte 1`},
	}
	for _, tt := range tests {
		_, err := Open(context.Background(), tt.raw, tt.ns)
		var urlErr *URLError
		var nsErr *NamespaceError
		if !errors.As(err, &urlErr) && !errors.As(err, &nsErr) {
			t.Errorf("Open(%q, %q) = %v, want a *URLError or *NamespaceError", tt.raw, tt.ns, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q, %q) = %q, want it to say %q without the password", tt.raw, tt.ns, err, tt.want)
		}
	}
}
