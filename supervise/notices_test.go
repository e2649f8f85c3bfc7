package supervise

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/leasectl/leasectl/leasestore"
)

// fakeNotices keeps the notices a supervisor records.
type fakeNotices struct {
	mu  sync.Mutex
	put []leasestore.Notice
}

func (f *fakeNotices) PutNotices(_ context.Context, notices []leasestore.Notice) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.put = append(f.put, notices...)
	return nil
}

func (f *fakeNotices) recorded() []leasestore.Notice {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]leasestore.Notice(nil), f.put...)
}

// A run whose lease is lost, its child killed for it, records the event
// for the reaper to notify, once its outcome was released.
func TestLeaseLostIsRecordedAsANotice(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	c := h.waitStarted()
	h.clock.Advance(testHeartbeat)
	h.nextRenew().reply <- leasestore.ErrLeaseLost
	if got := c.next(t); got.sig != syscall.SIGKILL {
		t.Fatalf("group received %v, want SIGKILL", got)
	}
	if got := h.notices.recorded(); len(got) != 0 {
		t.Errorf("recorded %+v before the run ended", got)
	}
	h.end(Exit{Code: -1, Signal: syscall.SIGKILL})
	got := h.notices.recorded()
	if len(got) != 1 {
		t.Fatalf("recorded %+v, want one lease-lost notice", got)
	}
	if n := got[0]; n.Kind != leasestore.NoticeLeaseLost || n.Key != "lease-lost/nightly/10" || n.Job != "nightly" ||
		n.Token != 10 || n.Worker != "w1" || n.Host != "h1" || !n.At.Equal(h.clock.Now()) || !strings.Contains(n.Detail, "lease lost") {
		t.Errorf("recorded %+v; want nightly's lease lost, token 10, worker w1 on h1, now, with the reason", n)
	}
}

// A run that ends on its own records nothing.
func TestCompletedRunRecordsNoNotice(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	h.waitStarted()
	h.end(Exit{Code: 0})
	if got := h.notices.recorded(); len(got) != 0 {
		t.Errorf("a completed run recorded %+v", got)
	}
}

// A run whose Acquire counted the previous run's crash records that crash
// (and the quarantine it led to) for the reaper to notify.
func TestRecoveredCrashIsRecordedAsANotice(t *testing.T) {
	h := newHarness(t, nil)
	h.store.queue(func(req leasestore.AcquireRequest) (*leasestore.Lease, error) {
		l := h.store.grantNow(req, 12)
		l.Recovered = &leasestore.Crash{Job: "nightly", Holder: "w0", Host: "h0", Token: 11, Crashes: 2, DetectedAt: h.clock.Now()}
		return l, nil
	})
	h.start()
	h.waitStarted()
	got := h.notices.recorded()
	if len(got) != 1 || got[0].Key != "crash/nightly/11" || got[0].Worker != "w0" || got[0].Crashes != 2 {
		t.Fatalf("recorded %+v, want the crash of w0's run, token 11, 2 consecutive", got)
	}
	h.end(Exit{Code: 0})
}
