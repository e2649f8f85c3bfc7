package storetest

import (
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// The other ways a waiter's turn comes (docs/semantics.md, Slots and the
// queue): every transition that frees a slot, or leaves one free, wakes the
// waiters whose turn it is, each by name.

// testCrashesWakeInTurn: a run released as crashed, which quarantines the
// job (its second crash), wakes the first waiter; so does the operator's release from that
// quarantine.
func testCrashesWakeInTurn(t *testing.T, h fixture) {
	if !h.WakesInTurn {
		t.Skip("the store wakes every waiter of the job")
	}
	s := client(t, h.Fixture)
	crashedOnce(t, s, 1)
	a := Acquire(t, s, twoCrashes(slotRequest("job", "a", LongTTL, 1, false)))
	subs := queueUp(t, s, "job", 1, "b")
	Release(t, s, a, leasestore.ResultCrashed)
	awaitWake(t, subs["b"], "b, first in the queue, on a's release as crashed")
	settle(subs["b"])
	if err := s.ReleaseQuarantine(Ctx(t), "job", leasestore.Note{By: "alice", Reason: "fixed"}); err != nil {
		t.Fatalf("ReleaseQuarantine: %v", err)
	}
	awaitWake(t, subs["b"], "b, first in the queue, on the release from quarantine")
}

// testCountedCrashesWakeInTurn: a crash counted by a scan, which
// quarantines the job (its second), wakes the first waiter; so does the late outcome of
// that run, which withdraws the crash and lifts the quarantine.
func testCountedCrashesWakeInTurn(t *testing.T, h fixture) {
	if !h.WakesInTurn {
		t.Skip("the store wakes every waiter of the job")
	}
	s := client(t, h.Fixture)
	crashedOnce(t, s, 2)
	Acquire(t, s, slotRequest("job", "x", LongTTL, 2, false))
	a := Acquire(t, s, twoCrashes(slotRequest("job", "a", h.shortTTL(), 2, false)))
	subs := queueUp(t, s, "job", 2, "b")
	h.awaitExpired(t, s, a)
	countCrash(t, s, "job")
	awaitWake(t, subs["b"], "b, first in the queue, on a's crash counted by a scan")
	settle(subs["b"])
	if c := recordLate(t, s, late(a, leasestore.ResultFailed)); !c.QuarantineLifted {
		t.Fatalf("a's late outcome: %+v, want the quarantine its crash led to lifted", c)
	}
	awaitWake(t, subs["b"], "b, first in the queue, once a's late outcome lifted the quarantine")
}

// testGiveUpWakesNext: a waiter that gives up on its grant (a late outcome
// without a token) leaves the queue while the slot is free, which brings
// the next waiter's turn, as when it leaves.
func testGiveUpWakesNext(t *testing.T, h fixture) {
	s, subs := bsTurnBeforeC(t, h)
	recordLate(t, s, leasestore.LateOutcome{Job: "job", Holder: "b", Outcome: Outcome(leasestore.ResultNotStarted)})
	awaitWake(t, subs["c"], "c, first once b gave up on its grant while the slot was free")
}

// twoCrashes is req with a threshold of 2 crashes, the least a registry
// takes.
func twoCrashes(req leasestore.AcquireRequest) leasestore.AcquireRequest {
	req.MaxCrashes = 2
	return req
}

// crashedOnce gives job (of slots slots) one crash, released as crashed,
// so that the next one quarantines it at a threshold of 2.
func crashedOnce(t *testing.T, s Client, slots int) {
	t.Helper()
	Release(t, s, Acquire(t, s, twoCrashes(slotRequest("job", "first", LongTTL, slots, false))), leasestore.ResultCrashed)
}

// settle lets a store that may wake a waiter more than once for one
// transition (etcd's watches) deliver the rest, and drops them, so that the
// next wake-up awaited is the next transition's: an absence, which no event
// marks, so it is a wait.
func settle(sub leasestore.Subscription) {
	time.Sleep(quietGuard)
	select {
	case <-sub.Released():
	default:
	}
}
