package supervise

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// queueStore is the fake store granting leasestore.MaxSlots slots a job,
// which records who left the queue.
type queueStore struct {
	*fakeStore
	left chan string
}

func (q *queueStore) Limits() leasestore.Limits {
	return leasestore.Limits{MaxSlots: leasestore.MaxSlots}
}

func (q *queueStore) Leave(_ context.Context, job, holder string) error {
	q.left <- job + " " + holder
	return nil
}

// withQueue gives h's supervisor the fake store as a queueStore, and
// returns the channel its Leave calls arrive on.
func withQueue(h *harness) chan string {
	left := make(chan string, 4)
	h.storeAs = func(f *fakeStore) leasestore.Driver { return &queueStore{f, left} }
	return left
}

// queued is the refusal of a run that waits second of two in the queue,
// the job held for an hour yet.
func queued() *leasestore.HeldError {
	return &leasestore.HeldError{Job: "nightly", Holder: "other", ExpiresIn: time.Hour, Position: 2, Waiting: 2}
}

func TestSlotsReachTheStoreAndTheChild(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Slots = 3; c.Wait = true })
	withQueue(h)
	asked := make(chan leasestore.AcquireRequest, 1)
	h.store.queue(func(req leasestore.AcquireRequest) (*leasestore.Lease, error) {
		asked <- req
		l := h.store.grantNow(req, 10)
		l.Slot = 2
		return l, nil
	})
	h.start()
	c := h.waitStarted()
	if req := <-asked; req.Slots != 3 || !req.Wait {
		t.Errorf("the store was asked for %d slots, waiting %v; want 3, waiting", req.Slots, req.Wait)
	}
	if !slices.Contains(c.env, "LEASECTL_SLOT=2") {
		t.Errorf("child environment %v lacks LEASECTL_SLOT=2", c.env)
	}
	h.end(Exit{Code: 0})
}

func TestSlotsAboveWhatTheStoreGrantsRefused(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Slots = 3 })
	h.start()
	r := h.refused()
	if !IsConfigError(r.err) || h.store.acquireCalls() != 0 {
		t.Fatalf("Run error = %v after %d acquires, want a usage error before any", r.err, h.store.acquireCalls())
	}
}

func TestWaitInTheQueueKeepsItsPlaceEachHeartbeat(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Wait = true })
	withQueue(h)
	h.store.refuse(queued())
	h.store.refuse(queued())
	h.store.grant(11)
	h.start()
	for range 2 {
		if held := <-h.held; held.Position != 2 {
			t.Fatalf("status shows position %d, want 2", held.Position)
		}
		// Not at the holder's expiry, an hour away: within the TTL that
		// keeps the run's place.
		h.clock.AwaitTimer(t, h.clock.Now().Add(testHeartbeat))
		h.clock.Advance(testHeartbeat)
	}
	h.waitStarted()
	h.end(Exit{Code: 0})
}

func TestWaitForAFreeSlotPromisedToOthersAsksAgainAtTheHeartbeat(t *testing.T) {
	// A slot is free but earlier waiters come first: no holder's expiry
	// to wait for, and no busy loop either.
	h := newHarness(t, func(c *Config) { c.Wait = true })
	withQueue(h)
	h.store.refuse(&leasestore.HeldError{Job: "nightly", Position: 2, Waiting: 2})
	h.store.grant(11)
	h.start()
	<-h.held
	h.clock.AwaitTimer(t, h.clock.Now().Add(testHeartbeat))
	if n := h.store.acquireCalls(); n != 1 {
		t.Fatalf("%d acquires before the heartbeat, want 1", n)
	}
	h.clock.Advance(testHeartbeat)
	h.waitStarted()
	h.end(Exit{Code: 0})
}

func TestGivingUpTheWaitLeavesTheQueue(t *testing.T) {
	t.Run("wait timeout", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.WaitTimeout = time.Second })
		left := withQueue(h)
		h.store.refuse(queued())
		h.start()
		<-h.held
		h.clock.Advance(time.Second)
		var wt *WaitTimeoutError
		if r := h.refused(); !errors.As(r.err, &wt) {
			t.Fatalf("Run error = %v, want *WaitTimeoutError", r.err)
		}
		if got := <-left; got != "nightly w1" {
			t.Errorf("left %q, want nightly w1", got)
		}
	})
	t.Run("signal", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Wait = true })
		left := withQueue(h)
		h.store.refuse(queued())
		h.start()
		<-h.held
		h.signals <- syscall.SIGINT
		if r := h.refused(); r.ending.Reason != Interrupted {
			t.Fatalf("Run = %+v, want Interrupted", r)
		}
		if got := <-left; got != "nightly w1" {
			t.Errorf("left %q, want nightly w1", got)
		}
	})
	t.Run("not queued: nothing to leave", func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.WaitTimeout = time.Second })
		left := withQueue(h)
		h.store.refuse(&leasestore.HeldError{Job: "nightly", Holder: "other", ExpiresIn: time.Hour})
		h.start()
		<-h.held
		h.clock.Advance(time.Second)
		h.refused()
		select {
		case got := <-left:
			t.Errorf("left %q without being queued", got)
		default:
		}
	})
}
