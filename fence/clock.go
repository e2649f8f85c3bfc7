package fence

import "time"

// Clock is a Checker's time source: when a token was confirmed, how old the
// feed's last heartbeat is, and when the next heartbeat is due. Tests pass
// a fake one to move time forward instead of sleeping.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

// realClock is the system clock; time.Now carries a monotonic reading, so
// the ages computed from it do not jump with the wall clock.
type realClock struct{}

// Now returns time.Now().
func (realClock) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
