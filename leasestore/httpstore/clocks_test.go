package httpstore

import (
	"testing"
	"time"

	"github.com/leasectl/leasectl/registry/api"
)

// A deadline goes to a registry on its own clock, through the last reading
// it sent, counted as taken when the request that brought it was sent (the
// earliest it can have been), plus the rate allowance; without a reading,
// or for another registry, none goes.
func TestDeadlineOnTheRegistrysClock(t *testing.T) {
	var c clocks
	sent := time.Now()
	if _, ok := c.deadline("https://a", sent.Add(time.Second)); ok {
		t.Fatal("a deadline without a reading of the registry's clock")
	}
	c.read("https://a", api.Clock{Instance: "i1", Micros: 5_000_000}, sent)
	for _, tc := range []struct {
		after time.Duration // the deadline, after the reading's send time
		want  int64
	}{
		{time.Second, 5_000_000 + 1_000_000 + 1_000},
		{3 * time.Second, 5_000_000 + 3_000_000 + 3_000},
		{0, 5_000_000},
	} {
		got, ok := c.deadline("https://a", sent.Add(tc.after))
		if !ok || got != (api.Clock{Instance: "i1", Micros: tc.want}) {
			t.Errorf("deadline %s after the reading = %+v, %v; want i1/%d", tc.after, got, ok, tc.want)
		}
	}
	if _, ok := c.deadline("https://b", sent.Add(time.Second)); ok {
		t.Error("a deadline for a registry whose clock was never read")
	}
}
