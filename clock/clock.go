// Package clock is the one time source of leasectl's timing code: the
// supervisor's heartbeat and safety deadline, the fence checker's
// heartbeat and lag, the registry's long polls, sweeps and sessions. Each
// takes a Clock, so that its tests move time (package fakeclock) instead of
// waiting for it.
package clock

import "time"

// Clock reads the time and sets timers.
type Clock interface {
	// Now returns the current time. The real clock's carries a monotonic
	// reading, so durations between two of them do not jump with the wall
	// clock.
	Now() time.Time
	// NewTimer returns a timer that fires once, d from now.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a ticker that fires every d, from d from now. A
	// tick its reader is not ready for is dropped, as time.Ticker's are.
	NewTicker(d time.Duration) Ticker
}

// Timer is a one-shot timer of a Clock.
type Timer interface {
	// C delivers the clock's time when the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was active.
	Stop() bool
	// Reset makes the timer fire d from now, whether or not it was active.
	Reset(d time.Duration)
}

// Ticker is a periodic timer of a Clock.
type Ticker interface {
	// C delivers the clock's time at each tick.
	C() <-chan time.Time
	// Stop ends the ticks.
	Stop()
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer returns a time.Timer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// NewTicker returns a time.Ticker.
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Stop() bool            { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }
