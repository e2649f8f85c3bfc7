package leasestore

import (
	"errors"
	"testing"
	"time"
)

// Limits.Check names the one limit a request is outside of, the TTL's
// first; zero bounds are no bound, and a zero MaxSlots is one slot.
func TestLimitsCheck(t *testing.T) {
	ranged := Limits{MinTTL: 2 * time.Second, MaxTTL: time.Hour, MaxSlots: 4}
	for _, tc := range []struct {
		name  string
		lim   Limits
		ttl   time.Duration
		slots int
		want  Limit // 0: within the limits
	}{
		{"within", ranged, time.Minute, 4, 0},
		{"zero slots is one", ranged, time.Minute, 0, 0},
		{"no TTL", ranged, 0, 1, TTLNotPositive},
		{"negative TTL", Limits{}, -time.Second, 1, TTLNotPositive},
		{"below the minimum", ranged, 1999 * time.Millisecond, 1, TTLBelowMin},
		{"above the maximum", ranged, time.Hour + 1, 1, TTLAboveMax},
		{"the TTL first", ranged, time.Second, 5, TTLBelowMin},
		{"negative slots", ranged, time.Minute, -1, SlotsNegative},
		{"too many slots", ranged, time.Minute, 5, SlotsAboveMax},
		{"unbounded TTL", Limits{MaxSlots: 1}, 1000 * time.Hour, 1, 0},
		{"zero MaxSlots: one slot", Limits{}, time.Minute, 1, 0},
		{"zero MaxSlots: not two", Limits{}, time.Minute, 2, SlotsAboveMax},
	} {
		err := tc.lim.Check(tc.ttl, tc.slots)
		var le *LimitError
		switch {
		case tc.want == 0 && err != nil:
			t.Errorf("%s: %v, want nil", tc.name, err)
		case tc.want != 0 && (!errors.As(err, &le) || le.Limit != tc.want):
			t.Errorf("%s: %v, want limit %d", tc.name, err, tc.want)
		case tc.want != 0 && le.TTLLimit() != (tc.want <= TTLAboveMax):
			t.Errorf("%s: TTLLimit %v", tc.name, le.TTLLimit())
		}
	}
	if got, want := (Limits{}).Check(time.Minute, 2).Error(), "2 is not 0 to the 1 this store runs per job"; got != want {
		t.Errorf("zero MaxSlots refusal %q, want %q", got, want)
	}
}
