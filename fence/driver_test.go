package fence

import (
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/filestore"
)

// A store's bare driver is refused whatever the pattern, with a message
// that says how to get the portable Store, which is accepted.
func TestNewRefusesABareDriver(t *testing.T) {
	d, err := filestore.Open(t.TempDir(), "ns")
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range []Options{{Pattern: Authoritative}, {Pattern: BoundedStaleness, MaxStaleness: time.Second}, {Pattern: WriteThrough}} {
		_, err := New(d, opts)
		if err == nil || !strings.Contains(err.Error(), "wrap it with leasestore.New or use leasestore.Open") {
			t.Errorf("pattern %v over the bare driver: %v, want refused saying how to wrap it", opts.Pattern, err)
		}
	}
	s := leasestore.New(d)
	defer s.Close()
	c, err := New(s, Options{Pattern: WriteThrough})
	if err != nil {
		t.Fatalf("WriteThrough over the portable Store: %v", err)
	}
	_ = c.Close()
}
