package supervise

import (
	"errors"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

func TestPendingWatchdogStopsItsWatchdogOnce(t *testing.T) {
	wd := &fakeWatchdog{}
	p := StartWatchdogWith(func() (Watchdog, error) { return wd, nil })
	for range 3 {
		if err := p.Close(); err != nil {
			t.Fatalf("Close = %v", err)
		}
	}
	if n := wd.closeCount(); n != 1 {
		t.Errorf("watchdog stopped %d times, want once however often Close is called", n)
	}
}

func TestPendingWatchdogWaitsForItsStartBeforeStopping(t *testing.T) {
	wd := &fakeWatchdog{}
	starting := make(chan struct{})
	p := StartWatchdogWith(func() (Watchdog, error) {
		<-starting
		return wd, nil
	})
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case <-closed:
		t.Fatal("Close returned while the watchdog was still starting: it would be left running")
	case <-time.After(10 * time.Millisecond):
	}
	close(starting)
	select {
	case <-closed:
	case <-time.After(hangGuard):
		t.Fatal("Close never returned")
	}
	if n := wd.closeCount(); n != 1 {
		t.Errorf("watchdog stopped %d times, want once", n)
	}
}

func TestPendingWatchdogThatFailedToStartHasNothingToStop(t *testing.T) {
	failed := errors.New("fork: resource temporarily unavailable")
	p := StartWatchdogWith(func() (Watchdog, error) { return nil, failed })
	if _, err := p.wait(); !errors.Is(err, failed) {
		t.Errorf("wait = %v, want the start's error", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close = %v, want nil: nothing was started", err)
	}
	var none *PendingWatchdog
	if err := none.Close(); err != nil {
		t.Errorf("Close of no watchdog = %v, want nil", err)
	}
}

func TestAWatchdogThatFailedToStartStartsNoChild(t *testing.T) {
	h := newHarness(t, nil)
	h.wdErr = errors.New("fork: resource temporarily unavailable")
	h.store.grant(10)
	h.start()
	var out leasestore.Outcome
	select {
	case out = <-h.store.released:
	case <-time.After(hangGuard):
		t.Fatal("the lease was never released")
	}
	if out.Result != leasestore.ResultNotStarted {
		t.Errorf("released %v, want not-started", out.Result)
	}
	r := <-h.result
	if !errors.Is(r.err, h.wdErr) {
		t.Errorf("Run error = %v, want the watchdog's", r.err)
	}
	h.noChildStarted("the child started without a watchdog to guard it")
}
