package api

import (
	"strconv"
	"strings"
)

// Headers of the registry's clock, with which a request says when its
// sender stops waiting for the answer (docs/design.md §3.1, Late requests).
const (
	// HeaderClock is on every answer: the registry's clock when it
	// answered.
	HeaderClock = "Leasectl-Clock"
	// HeaderDeadline is the latest time on the registry's clock, as the
	// client last read it (HeaderClock), at which its sender may still use
	// the answer: a request that reaches the registry later is refused
	// with CodeRequestExpired without being run. Optional.
	HeaderDeadline = "Leasectl-Deadline"
)

// Clock is a reading of one registry process's monotonic clock: the
// microseconds since it started. Readings of different processes (a
// restart, another registry) do not compare: Instance tells them apart.
// Only durations cross the network, so no two hosts' wall clocks are
// compared.
type Clock struct {
	Instance string
	Micros   int64
}

// String is the clock as a header value: INSTANCE/MICROS.
func (c Clock) String() string { return c.Instance + "/" + strconv.FormatInt(c.Micros, 10) }

// ParseClock reads a header value written by Clock.String.
func ParseClock(s string) (Clock, bool) {
	inst, us, ok := strings.Cut(s, "/")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || inst == "" || err != nil || n < 0 {
		return Clock{}, false
	}
	return Clock{Instance: inst, Micros: n}, true
}
