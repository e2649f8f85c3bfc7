package supervise_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/supervise"
)

// FuzzConfigValidate feeds Validate arbitrary durations, zero meaning "take
// the default" as the flags do. It checks that Validate never panics, that
// every refusal is a one-line usage error, and that every accepted Config
// keeps each timing rule of docs/design.md §4, computed without overflow.
func FuzzConfigValidate(f *testing.F) {
	ms := int64(time.Millisecond)
	f.Add(int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), 0) // every default
	f.Add(1000*ms, 200*ms, 500*ms, int64(0), int64(0), int64(0), int64(0), int64(0), 0)      // the chaos test's timing
	f.Add(3000*ms, 1000*ms, 1001*ms, 63001*ms, 3000*ms, int64(0), int64(0), int64(0), 2)     // every rule at its edge
	f.Add(-ms, -ms, -ms, -ms, -ms, -ms, -ms, -ms, -1)                                        // everything negative
	// What the fuzzer found once: a TTL so short that --ttl/3 is 0, and
	// relations that overflowed when computed as heartbeat*3 and ttl+1m.
	f.Add(int64(2), int64(0), int64(1), int64(0), int64(0), int64(0), int64(0), int64(0), 0)
	f.Add(int64(5e18), int64(4e18), int64(4.5e18), int64(6e18), int64(0), int64(0), int64(0), int64(0), 0)
	f.Add(int64(math.MaxInt64-int64(time.Second)), int64(0), int64(0), int64(math.MaxInt64), int64(0), int64(0), int64(0), int64(0), 0)
	f.Fuzz(func(t *testing.T, ttl, heartbeat, safety, evidence, grace, maxRuntime, minInterval, waitTimeout int64, maxCrashes int) {
		c := supervise.Config{
			Job: "fuzz", Command: []string{"true"},
			TTL: time.Duration(ttl), Heartbeat: time.Duration(heartbeat), Safety: time.Duration(safety),
			EvidenceTTL: time.Duration(evidence), Grace: time.Duration(grace), MaxRuntime: time.Duration(maxRuntime),
			MinInterval: time.Duration(minInterval), WaitTimeout: time.Duration(waitTimeout), MaxCrashes: maxCrashes,
		}
		c.SetDefaults()
		err := c.Validate()
		if err != nil {
			if !supervise.IsConfigError(err) {
				t.Fatalf("refusal %v is not a usage error", err)
			}
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("refusal is not one line: %q", err)
			}
			return
		}
		if broken := brokenTimingRule(c); broken != "" {
			t.Fatalf("accepted %+v, which breaks %s", c, broken)
		}
	})
}

// brokenTimingRule returns the first rule of docs/design.md §4 that c breaks, or "".
// Each relation is written so that it cannot overflow for durations that
// already passed the sign checks above it.
func brokenTimingRule(c supervise.Config) string {
	switch {
	case c.TTL <= 0 || c.Heartbeat <= 0 || c.Safety <= 0 || c.EvidenceTTL <= 0 || c.Grace <= 0:
		return "every duration in effect is positive"
	case c.MaxRuntime < 0 || c.MinInterval < 0 || c.WaitTimeout < 0:
		return "optional durations are off (0) or positive"
	case c.TTL < supervise.MinTTL:
		return "ttl ≥ 100ms"
	case c.Heartbeat > c.TTL/3:
		return "heartbeat ≤ ttl/3"
	case c.Safety <= c.Heartbeat || c.Safety >= c.TTL:
		return "heartbeat < safety < ttl"
	case c.Grace > c.TTL:
		return "grace ≤ ttl"
	case c.EvidenceTTL-time.Minute <= c.TTL:
		return "evidence-ttl > ttl + 1m"
	case c.MaxCrashes < 2:
		return "max-crashes ≥ 2"
	}
	return ""
}

// slotted are the limits of a store that grants a job up to 3 slots.
var slotted = leasestore.Limits{MaxSlots: 3}

// ttlLimited are the limits of a store that honours lease TTLs from 2 s to
// 1 h.
var ttlLimited = leasestore.Limits{MinTTL: 2 * time.Second, MaxTTL: time.Hour, MaxSlots: 3}

func TestCheckStoreNamesTheStoresTTLLimit(t *testing.T) {
	for _, tc := range []struct {
		ttl  time.Duration
		want string // "" for accepted
	}{
		{time.Second, "below the store's minimum lease TTL 2s"},
		{1999 * time.Millisecond, "below the store's minimum lease TTL 2s"},
		{2 * time.Second, ""},
		{time.Hour, ""},
		{time.Hour + time.Millisecond, "above the store's maximum lease TTL 1h0m0s"},
	} {
		c := supervise.Config{TTL: tc.ttl}
		err := c.CheckStore(ttlLimited)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("--ttl %s refused: %v", tc.ttl, err)
		case tc.want != "" && (err == nil || !supervise.IsConfigError(err) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("--ttl %s: got %v, want a usage error saying %q", tc.ttl, err, tc.want)
		}
	}
	c := supervise.Config{TTL: time.Millisecond}
	if err := c.CheckStore(slotted); err != nil {
		t.Errorf("a store without a TTL range refused --ttl 1ms: %v", err)
	}
}

func TestCheckStoreNamesTheStoresSlotLimit(t *testing.T) {
	for slots, want := range map[int]string{1: "", 3: "", 4: "--slots 4: this store runs at most 3 per job"} {
		c := supervise.Config{TTL: time.Minute, Slots: slots}
		err := c.CheckStore(slotted)
		switch {
		case want == "" && err != nil:
			t.Errorf("--slots %d refused: %v", slots, err)
		case want != "" && (err == nil || !supervise.IsConfigError(err) || err.Error() != want):
			t.Errorf("--slots %d: got %v, want the usage error %q", slots, err, want)
		}
	}
}

// A store whose Limits leave MaxSlots zero runs one slot per job: --slots 1
// is accepted, more is refused naming one.
func TestCheckStoreZeroMaxSlotsIsOne(t *testing.T) {
	unset := leasestore.Limits{}
	if c := (supervise.Config{TTL: time.Minute, Slots: 1}); c.CheckStore(unset) != nil {
		t.Errorf("--slots 1 refused by a store with MaxSlots unset: %v", c.CheckStore(unset))
	}
	c := supervise.Config{TTL: time.Minute, Slots: 2}
	if err := c.CheckStore(unset); err == nil || err.Error() != "--slots 2: this store runs at most 1 per job" {
		t.Errorf("--slots 2 on a store with MaxSlots unset: %v", err)
	}
}
