// Package fakeclock is a clock.Clock for tests: its time moves only when
// the test moves it, and the test can wait until the code under test has
// set the timer it expects, instead of sleeping.
package fakeclock

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasectl/leasectl/clock"
)

// HangGuard bounds AwaitTimer: a timer not set by then fails the test
// rather than hang it.
const HangGuard = 5 * time.Second

// Clock is a clock.Clock whose time moves only by Advance and Jump.
//
// A timer's fire is handed over: Advance returns once its reader received
// it, or once the timer was stopped or reset, so a test that advanced past
// a timer knows the code has seen it. A ticker's tick is not (a reader that
// is not ready drops it, as with time.Ticker).
type Clock struct {
	mu     sync.Mutex
	armed  *sync.Cond // broadcast whenever a timer is armed
	now    time.Time
	timers []*timer
}

var _ clock.Clock = (*Clock)(nil)

// New returns a Clock that reads now until moved.
func New(now time.Time) *Clock {
	c := &Clock{now: now}
	c.armed = sync.NewCond(&c.mu)
	return c
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when the clock reaches d from now.
func (c *Clock) NewTimer(d time.Duration) clock.Timer {
	return c.add(&timer{c: c, ch: make(chan time.Time)}, d)
}

// NewTicker returns a ticker that fires each time the clock passes another
// d from now.
func (c *Clock) NewTicker(d time.Duration) clock.Ticker {
	if d <= 0 {
		panic("fakeclock: non-positive interval for NewTicker")
	}
	return ticker{c.add(&timer{c: c, ch: make(chan time.Time, 1), period: d}, d)}
}

func (c *Clock) add(t *timer, d time.Duration) *timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t.arm(c.now.Add(d))
	return t
}

// Advance moves the time forward by d, firing the timers and tickers due
// in the order of their deadlines, the time at each fire being its
// deadline. It returns once every timer it fired was received or stopped;
// it panics when one is neither within HangGuard, rather than hang the
// test.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		next := c.due(target)
		if next == nil {
			c.now = target
			c.mu.Unlock()
			return
		}
		if next.when.After(c.now) {
			c.now = next.when
		}
		when, ch, cancel := next.when, next.ch, next.cancel
		if next.period > 0 {
			next.when = when.Add(next.period)
			c.mu.Unlock()
			select {
			case ch <- when:
			default:
			}
			continue
		}
		next.disarm()
		c.mu.Unlock()
		guard := time.NewTimer(HangGuard)
		select {
		case ch <- when:
		case <-cancel:
		case <-guard.C:
			panic(fmt.Sprintf("fakeclock: the timer that fired at %s was neither received nor stopped within %s", when, HangGuard))
		}
		guard.Stop()
	}
}

// due returns the active timer with the earliest deadline not after
// target, or nil; c.mu is held.
func (c *Clock) due(target time.Time) *timer {
	var next *timer
	for _, t := range c.timers {
		if t.active && !t.when.After(target) && (next == nil || t.when.Before(next.when)) {
			next = t
		}
	}
	return next
}

// Jump moves the time forward by d without firing anything: what a
// process frozen past its timers finds when it runs again.
func (c *Clock) Jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// AwaitTimer returns once a timer or ticker is set to fire at when: the
// sign that the code under test has handled whatever made it set it. It
// fails t if none is within HangGuard.
func (c *Clock) AwaitTimer(t testing.TB, when time.Time) {
	t.Helper()
	timedOut := false
	guard := time.AfterFunc(HangGuard, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		timedOut = true
		c.armed.Broadcast()
	})
	defer guard.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for !c.setAt(when) {
		if timedOut {
			t.Fatalf("no timer was set to fire at %s within %s", when, HangGuard)
		}
		c.armed.Wait()
	}
}

// setAt reports whether an active timer fires at when; c.mu is held.
func (c *Clock) setAt(when time.Time) bool {
	for _, t := range c.timers {
		if t.active && t.when.Equal(when) {
			return true
		}
	}
	return false
}

// timer is a Clock's timer, or with a period its ticker.
type timer struct {
	c      *Clock
	ch     chan time.Time
	period time.Duration // 0 for a one-shot timer
	when   time.Time
	active bool          // armed, and in its clock's list
	cancel chan struct{} // closed when the timer is stopped or reset
}

// arm sets the timer to fire at when, and lists it with its clock; the
// clock's lock is held.
func (t *timer) arm(when time.Time) {
	if !t.active {
		t.c.timers = append(t.c.timers, t)
	}
	t.when, t.active = when, true
	t.cancel = make(chan struct{})
	t.c.armed.Broadcast()
}

// disarm takes the timer out of its clock's list, so that a long test's
// stopped and fired timers do not pile up; the clock's lock is held.
func (t *timer) disarm() {
	if !t.active {
		return
	}
	t.active = false
	if i := slices.Index(t.c.timers, t); i >= 0 {
		t.c.timers = slices.Delete(t.c.timers, i, i+1)
	}
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.disarm()
	close(t.cancel)
	t.cancel = make(chan struct{})
	return was
}

func (t *timer) Reset(d time.Duration) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	close(t.cancel)
	t.arm(t.c.now.Add(d))
}

// ticker is a timer with a period, seen as a clock.Ticker.
type ticker struct{ t *timer }

func (k ticker) C() <-chan time.Time { return k.t.C() }
func (k ticker) Stop()               { k.t.Stop() }
