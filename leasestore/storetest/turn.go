package storetest

import (
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// quietGuard is how long a waiter whose turn has not come is watched for a
// wake-up it must not get. Notifications to different waiters travel on
// connections of their own, in no order between them: a store that woke
// every waiter would deliver within this (a lost wake-up is caught by the
// waits for the right ones, which are events).
const quietGuard = 200 * time.Millisecond

// testWakeInTurn: a release, or a waiter leaving while a slot is free,
// wakes the waiters whose turn it is, and not those behind them
// (docs/semantics.md, Slots and the queue).
func testWakeInTurn(t *testing.T, h fixture) {
	if !h.WakesInTurn {
		t.Skip("the store wakes every waiter of the job")
	}
	s := client(t, h.Fixture)
	a := Acquire(t, s, slotRequest("job", "a", LongTTL, 1, true))
	subs := queueUp(t, s, "job", 1, "b", "c", "d")
	Release(t, s, a, leasestore.ResultCompleted)
	awaitWake(t, subs["b"], "b, first in the queue, on a's release")
	quiet(t, subs, "c", "d")
	// b gives up without asking: its slot is c's now.
	if err := s.Leave(Ctx(t), "job", "b"); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	awaitWake(t, subs["c"], "c, first once b left while the slot was free")
	quiet(t, subs, "d")
	c := Acquire(t, s, slotRequest("job", "c", LongTTL, 1, true))
	Release(t, s, c, leasestore.ResultCompleted)
	awaitWake(t, subs["d"], "d, first in the queue, on c's release")
}

// testRefusedHeadWakesNext: a waiter refused in its turn (here, too soon
// after the last success) leaves the queue while the slot is free, which
// brings the next waiter's turn.
func testRefusedHeadWakesNext(t *testing.T, h fixture) {
	s, subs := bsTurnBeforeC(t, h)
	// The job's own subscription is the registry's, and that of the
	// waiters of a leasectl older than waking in turn.
	job, err := s.Subscribe(Ctx(t), "job", "")
	if err != nil {
		t.Fatalf("Subscribe to the job: %v", err)
	}
	t.Cleanup(func() { _ = job.Close() })
	req := slotRequest("job", "b", LongTTL, 1, true)
	req.MinInterval = time.Hour
	_, err = s.Acquire(Ctx(t), req)
	errorAs[*leasestore.TooSoonError](t, err)
	awaitWake(t, subs["c"], "c, first once b was refused while the slot was free")
	awaitWake(t, job, "the job's subscription, once b was refused while the slot was free")
}

// bsTurnBeforeC brings waiter b's turn on a job of one slot, with c
// waiting behind it: a holds the job, b and c queue up, and a's release
// wakes b. It returns the store's client and b's and c's subscriptions; a
// store that wakes every waiter skips the test.
func bsTurnBeforeC(t *testing.T, h fixture) (Client, map[string]leasestore.Subscription) {
	t.Helper()
	if !h.WakesInTurn {
		t.Skip("the store wakes every waiter of the job")
	}
	s := client(t, h.Fixture)
	a := Acquire(t, s, slotRequest("job", "a", LongTTL, 1, true))
	subs := queueUp(t, s, "job", 1, "b", "c")
	Release(t, s, a, leasestore.ResultCompleted)
	awaitWake(t, subs["b"], "b, first in the queue, on a's release")
	return s, subs
}

// queueUp subscribes each of waiters to job's wake-ups, in turn, and puts
// it in the job's queue (a job of slots slots whose slots are all held),
// and returns their subscriptions, closed when the test ends.
func queueUp(t *testing.T, s Client, job string, slots int, waiters ...string) map[string]leasestore.Subscription {
	t.Helper()
	subs := map[string]leasestore.Subscription{}
	for _, w := range waiters {
		sub, err := s.Subscribe(Ctx(t), job, w)
		if err != nil {
			t.Fatalf("Subscribe for %s: %v", w, err)
		}
		t.Cleanup(func() { _ = sub.Close() })
		subs[w] = sub
		refused(t, s, slotRequest(job, w, LongTTL, slots, true))
	}
	return subs
}

// awaitWake waits for sub's wake-up.
func awaitWake(t *testing.T, sub leasestore.Subscription, who string) {
	t.Helper()
	select {
	case <-sub.Released():
	case <-time.After(HangGuard):
		t.Fatalf("%s was not woken within %s", who, HangGuard)
	}
}

// quiet fails when any of the waiters of subs named was woken within
// quietGuard: an absence, which no event marks, so it is a wait.
func quiet(t *testing.T, subs map[string]leasestore.Subscription, waiters ...string) {
	t.Helper()
	time.Sleep(quietGuard)
	for _, w := range waiters {
		select {
		case <-subs[w].Released():
			t.Errorf("%s was woken before its turn", w)
		default:
		}
	}
}
