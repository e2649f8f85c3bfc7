package supervise

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// fakeNotices keeps the notices a supervisor records; with gate set, a
// put waits for it to close.
type fakeNotices struct {
	// gate, when set, holds every put until it is closed; entered, when
	// set, receives a value as each put reaches it.
	gate     chan struct{}
	entered  chan struct{}
	mu       sync.Mutex
	put      []leasestore.Notice
	deadline time.Time // of the last put's context
}

func (f *fakeNotices) PutNotices(ctx context.Context, notices []leasestore.Notice) error {
	f.mu.Lock()
	f.deadline, _ = ctx.Deadline()
	f.mu.Unlock()
	if f.gate != nil {
		if f.entered != nil {
			f.entered <- struct{}{}
		}
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.put = append(f.put, notices...)
	return nil
}

// deadlineLeft is how long the last put's context had left, from now;
// zero without a deadline or a put.
func (f *fakeNotices) deadlineLeft() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.deadline.IsZero() {
		return 0
	}
	return time.Until(f.deadline)
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
	h.end(Exit{Code: 0})
	got := h.notices.recorded()
	if len(got) != 1 || got[0].Key != "crash/nightly/11" || got[0].Worker != "w0" || got[0].Crashes != 2 {
		t.Fatalf("recorded %+v, want the crash of w0's run, token 11, 2 consecutive", got)
	}
}

// The previous run's crash is recorded beside the run, bounded by
// --safety: a store slow to take it never delays the child's start, and
// the run waits for it before it returns, so it is not lost.
func TestRecoveredCrashDoesNotDelayTheStart(t *testing.T) {
	h := newHarness(t, nil)
	h.notices.gate, h.notices.entered = make(chan struct{}), make(chan struct{}, 1)
	h.store.queue(func(req leasestore.AcquireRequest) (*leasestore.Lease, error) {
		l := h.store.grantNow(req, 12)
		l.Recovered = &leasestore.Crash{Job: "nightly", Holder: "w0", Host: "h0", Token: 11, Crashes: 1, DetectedAt: h.clock.Now()}
		return l, nil
	})
	h.start()
	h.waitStarted() // fails the test if the put held the start back
	if got := h.notices.recorded(); len(got) != 0 {
		t.Fatalf("recorded %+v while the store held the put", got)
	}
	<-h.notices.entered // the put, in the background, may reach the store after the start
	if left := h.notices.deadlineLeft(); left <= 0 || left > testSafety {
		t.Errorf("the put had %s left, want a deadline within --safety %s", left, testSafety)
	}
	close(h.notices.gate)
	h.end(Exit{Code: 0})
	if got := h.notices.recorded(); len(got) != 1 || got[0].Key != "crash/nightly/11" {
		t.Errorf("recorded %+v, want the crash of token 11 before Run returned", got)
	}
}

// crashCounting is the fake store whose Status tells what a store tells
// after it counted a run's crashed outcome, and whose RecordLate says it
// released the run when late is set.
type crashCounting struct {
	*fakeStore
	status *leasestore.JobStatus
	late   *leasestore.Correction
}

func (c crashCounting) Status(context.Context, string) (*leasestore.JobStatus, error) {
	st := *c.status
	return &st, nil
}

func (c crashCounting) RecordLate(ctx context.Context, late leasestore.LateOutcome) (leasestore.Correction, error) {
	if _, err := c.fakeStore.RecordLate(ctx, late); err != nil || c.late == nil {
		return leasestore.Correction{}, err
	}
	return *c.late, nil
}

// A child that crashed (SIGSEGV, the OOM killer's SIGKILL), its outcome
// released in time or late while its evidence was there, has its crash
// recorded as a notice, and the quarantine it led to, under the keys the
// reaper would record them with.
func TestReleasedCrashIsRecordedAsNotices(t *testing.T) {
	crashedAt := time.Date(2026, 11, 21, 2, 0, 1, 0, time.UTC)
	quarantined := &leasestore.JobStatus{Crashes: 2, Quarantine: &leasestore.Quarantine{By: leasestore.ByLeasectl}, History: []leasestore.Event{
		{Kind: leasestore.EventCrashed, Worker: "w0", Token: 9},
		{Kind: leasestore.EventAcquired, Worker: "w1", Token: 10},
		{At: crashedAt, Kind: leasestore.EventCrashed, Worker: "w1", Token: 10, Result: leasestore.ResultCrashed},
		{At: crashedAt, Kind: leasestore.EventQuarantined, Worker: "w1", Token: 10},
	}}
	counted := &leasestore.JobStatus{Crashes: 1, History: []leasestore.Event{
		{At: crashedAt, Kind: leasestore.EventCrashed, Worker: "w1", Token: 10, Result: leasestore.ResultCrashed},
	}}
	tests := []struct {
		name   string
		status *leasestore.JobStatus
		lost   bool // the release finds the lease lost; RecordLate releases it
		exit   Exit
		want   []string
	}{
		{"a crash that quarantined the job", quarantined, false, Exit{Code: -1, Signal: syscall.SIGSEGV},
			[]string{"crash/nightly/10", "quarantined/nightly/10"}},
		{"a crash recorded late while its evidence was there", counted, true, Exit{Code: -1, Signal: syscall.SIGKILL},
			[]string{"crash/nightly/10"}},
		{"a failure is no crash", counted, false, Exit{Code: 3}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.storeAs = func(f *fakeStore) leasestore.Driver {
				return crashCounting{fakeStore: f, status: tt.status, late: &leasestore.Correction{Released: true, Crashes: 1}}
			}
			h.store.grant(10)
			h.start()
			h.waitStarted()
			if tt.lost {
				h.store.failReleases(leasestore.ErrLeaseLost)
				h.child.done <- tt.exit
				select {
				case r := <-h.result:
					if r.err != nil {
						t.Fatal(r.err)
					}
				case <-time.After(hangGuard):
					t.Fatal("Run did not return")
				}
			} else {
				h.end(tt.exit)
			}
			var keys []string
			for _, n := range h.notices.recorded() {
				keys = append(keys, n.Key)
				if n.Worker != "w1" || n.Host != "h1" || n.Token != 10 || n.Crashes != tt.status.Crashes || !n.At.Equal(crashedAt) {
					t.Errorf("notice %+v; want w1 on h1, token 10, %d crashes, at %s", n, tt.status.Crashes, crashedAt)
				}
				if n.Kind == leasestore.NoticeCrash && !strings.Contains(n.Detail, "killed by SIG") {
					t.Errorf("crash notice %q; want how the child died", n.Detail)
				}
			}
			if !slices.Equal(keys, tt.want) {
				t.Errorf("recorded %v, want %v", keys, tt.want)
			}
		})
	}
}

// statusHung is the fake store whose Status answers only when its caller
// gives up, telling how long it was given.
type statusHung struct {
	*fakeStore
	given chan time.Duration
}

func (s statusHung) Status(ctx context.Context, _ string) (*leasestore.JobStatus, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		s.given <- 0
		return nil, errors.New("no deadline")
	}
	s.given <- time.Until(deadline)
	<-ctx.Done()
	return nil, ctx.Err()
}

// A store that does not answer the status read after a crash costs the
// run at most --safety, after the release: the outcome is released first,
// and the run ends with the child's exit, without the notice.
func TestCrashNoticeIsBoundedBySafety(t *testing.T) {
	h := newHarness(t, nil)
	given := make(chan time.Duration, 1)
	h.storeAs = func(f *fakeStore) leasestore.Driver { return statusHung{fakeStore: f, given: given} }
	h.store.grant(10)
	h.start()
	h.waitStarted()
	ending, out := h.end(Exit{Code: -1, Signal: syscall.SIGSEGV})
	if out.Result != leasestore.ResultCrashed || ending.Exit.Signal != syscall.SIGSEGV {
		t.Errorf("released %s, ended %+v; want the crash released and the child's exit", out.Result, ending.Exit)
	}
	select {
	case g := <-given:
		if g <= 0 || g > testSafety {
			t.Errorf("the status read was given %s, want at most --safety %s", g, testSafety)
		}
	default:
		t.Errorf("no status was read after the crash")
	}
	if got := h.notices.recorded(); len(got) != 0 {
		t.Errorf("recorded %+v without the job's status", got)
	}
}
