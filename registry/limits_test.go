package registry

import (
	"fmt"
	"testing"
	"time"
)

// Requests from very many addresses do not grow the limiter without bound,
// and none of them is refused for it.
func TestLimiterIsBounded(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newLimiter(5, func() time.Time { return now })
	for i := range maxLimited + 1000 {
		if !l.allow(fmt.Sprintf("2001:db8::%x", i)) {
			t.Fatalf("the first request of address %d was refused", i)
		}
		if n := len(l.buckets); n > maxLimited {
			t.Fatalf("%d addresses tracked, the bound is %d", n, maxLimited)
		}
	}
	// An address that spent its burst is still tracked, and refused.
	for range 10 {
		l.allow("192.0.2.1")
	}
	if l.allow("192.0.2.1") {
		t.Error("an address past its burst was let through while the limiter was full")
	}
}
