package fakeclock

import (
	"testing"
	"time"
)

var start = time.Date(2026, 11, 27, 2, 0, 0, 0, time.UTC)

func TestAdvanceFiresDueTimersInOrderAndWaitsForTheirReader(t *testing.T) {
	c := New(start)
	late, early := c.NewTimer(2*time.Second), c.NewTimer(time.Second)
	c.NewTimer(time.Hour) // not due
	got := make(chan time.Time, 2)
	go func() {
		got <- <-early.C()
		got <- <-late.C()
	}()
	c.Advance(3 * time.Second)
	// Both fires were received before Advance returned.
	if a, b := <-got, <-got; !a.Equal(start.Add(time.Second)) || !b.Equal(start.Add(2*time.Second)) {
		t.Errorf("fired at %s then %s, want +1s then +2s", a, b)
	}
	if now := c.Now(); !now.Equal(start.Add(3 * time.Second)) {
		t.Errorf("Now = %s after Advance(3s), want %s", now, start.Add(3*time.Second))
	}
}

func TestAStoppedOrResetTimerReleasesAdvance(t *testing.T) {
	c := New(start)
	stopped := c.NewTimer(time.Second)
	if !stopped.Stop() {
		t.Error("Stop of an active timer reported it inactive")
	}
	reset := c.NewTimer(time.Second)
	reset.Reset(time.Minute)
	c.Advance(2 * time.Second) // returns: nothing is due
	select {
	case <-stopped.C():
		t.Error("a stopped timer fired")
	case <-reset.C():
		t.Error("a timer reset past the target fired")
	default:
	}
	go c.Advance(time.Minute)
	// Reset at start: it fires a minute after start, not after its first
	// deadline.
	if at := <-reset.C(); !at.Equal(start.Add(time.Minute)) {
		t.Errorf("reset timer fired at %s, want %s", at, start.Add(time.Minute))
	}
}

func TestATickerDropsTicksItsReaderMissed(t *testing.T) {
	c := New(start)
	tk := c.NewTicker(time.Second)
	c.Advance(3 * time.Second) // nobody reads: one tick kept, two dropped
	if at := <-tk.C(); !at.Equal(start.Add(time.Second)) {
		t.Errorf("kept tick at %s, want the first, %s", at, start.Add(time.Second))
	}
	select {
	case at := <-tk.C():
		t.Errorf("a second tick (%s) was kept", at)
	default:
	}
	c.AwaitTimer(t, start.Add(4*time.Second))
	tk.Stop()
	c.Advance(time.Second)
	select {
	case <-tk.C():
		t.Error("a stopped ticker ticked")
	default:
	}
}

func TestJumpFiresNothing(t *testing.T) {
	c := New(start)
	tm := c.NewTimer(time.Second)
	c.Jump(time.Hour)
	select {
	case <-tm.C():
		t.Error("Jump fired a timer")
	default:
	}
	if !c.Now().Equal(start.Add(time.Hour)) {
		t.Errorf("Now = %s after Jump(1h)", c.Now())
	}
	// The timer is overdue, and the next Advance fires it.
	go c.Advance(0)
	if at := <-tm.C(); !at.Equal(start.Add(time.Second)) {
		t.Errorf("overdue timer fired at %s, want its deadline %s", at, start.Add(time.Second))
	}
}

func TestAwaitTimerReturnsOnceTheTimerIsSet(t *testing.T) {
	c := New(start)
	go func() { c.NewTimer(5 * time.Second) }()
	c.AwaitTimer(t, start.Add(5*time.Second))
}

// Stopped and fired timers leave the clock, so a long test's heartbeats
// (a timer each) do not pile up.
func TestStoppedAndFiredTimersLeaveTheClock(t *testing.T) {
	c := New(start)
	for range 1000 {
		c.NewTimer(time.Second).Stop()
	}
	fired := c.NewTimer(time.Second)
	go func() { <-fired.C() }()
	c.Advance(time.Second)
	c.mu.Lock()
	n := len(c.timers)
	c.mu.Unlock()
	if n != 0 {
		t.Errorf("%d timers kept after they were stopped or fired, want 0", n)
	}
}
