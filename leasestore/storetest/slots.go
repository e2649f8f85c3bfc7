package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// The contract of slots and of the queue of waiters (docs/semantics.md,
// Slots and the queue).

// slotRequest is Request for a job of slots slots, waiting when wait.
func slotRequest(job, worker string, ttl time.Duration, slots int, wait bool) leasestore.AcquireRequest {
	req := Request(job, worker, ttl)
	req.Slots, req.Wait = slots, wait
	return req
}

// refused asks for req and returns the *HeldError it must get.
func refused(t *testing.T, s Client, req leasestore.AcquireRequest) *leasestore.HeldError {
	t.Helper()
	l, err := s.Acquire(Ctx(t), req)
	if err == nil {
		t.Fatalf("%s was granted %+v, want it refused", req.Holder, l)
	}
	return errorAs[*leasestore.HeldError](t, err)
}

func workersOf(holders []leasestore.Holder) []string {
	var w []string
	for _, h := range holders {
		w = append(w, h.Worker)
	}
	return w
}

func waitersOf(queue []leasestore.Waiter) []string {
	var w []string
	for _, q := range queue {
		w = append(w, q.Worker)
	}
	return w
}

func testSlots(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	var leases []*leasestore.Lease
	for i, w := range []string{"a", "b", "c"} {
		l := Acquire(t, s, slotRequest("job", w, LongTTL, 3, false))
		if l.Slot != i {
			t.Errorf("%s got slot %d, want %d", w, l.Slot, i)
		}
		if i > 0 && l.Token <= leases[i-1].Token {
			t.Errorf("%s got token %d after %d: each grant takes the next of the job's one rising sequence", w, l.Token, leases[i-1].Token)
		}
		leases = append(leases, l)
	}
	if held := refused(t, s, slotRequest("job", "d", LongTTL, 3, false)); held.Slots != 3 || held.Holder == "" {
		t.Errorf("a fourth run refused with %+v: want every one of the 3 slots held", held)
	}
	st := Status(t, s, "job")
	if st.Slots != 3 || !slices.Equal(workersOf(st.Holders), []string{"a", "b", "c"}) || st.State != leasestore.StateRunning {
		t.Errorf("status: %d slots, holders %v, state %s; want 3 slots held by a, b, c", st.Slots, workersOf(st.Holders), st.State)
	}
	listed, err := s.Leases(Ctx(t))
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	if !slices.Equal(workersOf(listed), []string{"a", "b", "c"}) {
		t.Errorf("Leases lists %v, want a, b, c by slot", workersOf(listed))
	}
	for _, l := range leases {
		if err := s.CheckToken(Ctx(t), "job", l.Token); err != nil {
			t.Errorf("token %d of the live run in slot %d: %v", l.Token, l.Slot, err)
		}
	}
	Release(t, s, leases[1], leasestore.ResultCompleted)
	if err := s.Renew(Ctx(t), leases[1]); !errors.Is(err, leasestore.ErrLeaseLost) {
		t.Errorf("renewal of the released slot: %v, want ErrLeaseLost", err)
	}
	l := Acquire(t, s, slotRequest("job", "d", LongTTL, 3, false))
	if l.Slot != 1 || l.Token <= leases[2].Token {
		t.Errorf("d got slot %d token %d, want the freed slot 1 and a token above %d", l.Slot, l.Token, leases[2].Token)
	}
	for _, other := range []*leasestore.Lease{leases[0], leases[2]} {
		if err := s.Renew(Ctx(t), other); err != nil {
			t.Errorf("renewal of slot %d: %v", other.Slot, err)
		}
	}
}

func testSlotsMustAgree(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	l := Acquire(t, s, slotRequest("job", "a", LongTTL, 3, false))
	_, err := s.Acquire(Ctx(t), slotRequest("job", "b", LongTTL, 2, true))
	if se := errorAs[*leasestore.SlotsError](t, err); se.Slots != 3 || se.Requested != 2 {
		t.Errorf("refusal %+v, want 3 slots in flight against 2 asked", se)
	}
	if st := Status(t, s, "job"); len(st.Queue) != 0 {
		t.Errorf("a run refused for its slots waits in the queue: %v", waitersOf(st.Queue))
	}
	Release(t, s, l, leasestore.ResultCompleted)
	Acquire(t, s, slotRequest("job", "b", LongTTL, 2, false))
	if st := Status(t, s, "job"); st.Slots != 2 {
		t.Errorf("slots %d once the change took effect, want 2", st.Slots)
	}
}

func testQueueOrder(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	a := Acquire(t, s, slotRequest("job", "a", LongTTL, 1, true))
	for i, w := range []string{"b", "c", "d"} {
		if held := refused(t, client(t, h.Fixture), slotRequest("job", w, LongTTL, 1, true)); held.Position != i+1 || held.Waiting != i+1 {
			t.Errorf("%s waits at %d of %d, want %d of %d", w, held.Position, held.Waiting, i+1, i+1)
		}
	}
	if st := Status(t, s, "job"); !slices.Equal(waitersOf(st.Queue), []string{"b", "c", "d"}) {
		t.Errorf("queue %v, want b, c, d", waitersOf(st.Queue))
	}
	if held := refused(t, s, slotRequest("job", "x", LongTTL, 1, false)); held.Position != 0 {
		t.Errorf("a run that does not wait was queued at %d", held.Position)
	}
	sub, err := s.Subscribe(Ctx(t), "job", "")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	Release(t, s, a, leasestore.ResultCompleted)
	select {
	case <-sub.Released():
	case <-time.After(HangGuard):
		t.Fatalf("no release notification within %s", HangGuard)
	}
	// The last waiter asks first, then the second: the free slot is b's.
	for _, w := range []string{"d", "c"} {
		if held := refused(t, s, slotRequest("job", w, LongTTL, 1, true)); held.Holder != "" {
			t.Errorf("%s refused with %+v, want the free slot promised to b", w, held)
		}
	}
	if held := refused(t, s, slotRequest("job", "x", LongTTL, 1, false)); held.Waiting != 3 {
		t.Errorf("a run that does not wait, refused with %+v: want it behind the 3 waiters", held)
	}
	Acquire(t, s, slotRequest("job", "b", LongTTL, 1, true))
	st := Status(t, s, "job")
	if !slices.Equal(waitersOf(st.Queue), []string{"c", "d"}) || st.Holder == nil || st.Holder.Worker != "b" {
		t.Errorf("after b's grant: holder %v, queue %v; want b, then c, d waiting", st.Holder, waitersOf(st.Queue))
	}
}

func testWaiterVanishes(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	a := Acquire(t, s, slotRequest("job", "a", LongTTL, 1, true))
	gone := slotRequest("job", "b", h.shortTTL(), 1, true)
	refused(t, s, gone)
	asked := time.Now()
	refused(t, s, slotRequest("job", "c", LongTTL, 1, true))
	Release(t, s, a, leasestore.ResultCompleted)
	if held := refused(t, s, slotRequest("job", "c", LongTTL, 1, true)); held.Position != 2 && time.Since(asked) < gone.TTL/2 {
		t.Errorf("c refused at %d while b's place was alive, want 2", held.Position)
	}
	// b never asks again: its place lapses within its TTL.
	for guard := time.Now().Add(h.expiryGuard()); ; time.Sleep(10 * time.Millisecond) {
		st := Status(t, s, "job")
		if !slices.Contains(waitersOf(st.Queue), "b") {
			break
		}
		if time.Now().After(guard) {
			t.Fatalf("b still waits %s after it last asked, with a TTL of %s", time.Since(asked), gone.TTL)
		}
	}
	Acquire(t, s, slotRequest("job", "c", LongTTL, 1, true))
}

func testWaiterLeaves(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	a := Acquire(t, s, slotRequest("job", "a", LongTTL, 1, true))
	refused(t, s, slotRequest("job", "b", LongTTL, 1, true))
	refused(t, s, slotRequest("job", "c", LongTTL, 1, true))
	if err := s.Leave(Ctx(t), "job", "b"); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if err := s.Leave(Ctx(t), "job", "nobody"); err != nil {
		t.Errorf("Leave of a holder not in the queue: %v", err)
	}
	if st := Status(t, s, "job"); !slices.Equal(waitersOf(st.Queue), []string{"c"}) {
		t.Errorf("queue %v after b left, want c", waitersOf(st.Queue))
	}
	Release(t, s, a, leasestore.ResultCompleted)
	Acquire(t, s, slotRequest("job", "c", LongTTL, 1, true))
}

func testCrashWhileOthersWait(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	Acquire(t, s, slotRequest("job", "x", LongTTL, 2, false))
	crashing := slotRequest("job", "a", h.shortTTL(), 2, false)
	a := Acquire(t, s, crashing)
	sub, err := s.Subscribe(Ctx(t), "job", "")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	refused(t, s, slotRequest("job", "b", LongTTL, 2, true))
	refused(t, s, slotRequest("job", "c", LongTTL, 2, true))
	h.awaitExpired(t, s, a)
	// c asks first: it counts a's crash, which frees a slot, and is
	// refused all the same: the slot is b's.
	if held := refused(t, s, slotRequest("job", "c", LongTTL, 2, true)); held.Position != 2 {
		t.Errorf("c refused at %d, want 2", held.Position)
	}
	select {
	case <-sub.Released():
	case <-time.After(HangGuard):
		t.Fatalf("the crash counted woke no waiter within %s", HangGuard)
	}
	l := Acquire(t, s, slotRequest("job", "b", LongTTL, 2, true))
	if l.Slot != a.Slot || l.Recovered != nil {
		t.Errorf("b got slot %d, recovered %+v: want a's slot %d, its crash counted before", l.Slot, l.Recovered, a.Slot)
	}
	st := Status(t, s, "job")
	if st.Crashes != 1 || !slices.Equal(workersOf(st.Holders), []string{"x", "b"}) || !slices.Equal(waitersOf(st.Queue), []string{"c"}) {
		t.Errorf("crashes %d, holders %v, queue %v; want a's crash counted once, x and b holding, c waiting",
			st.Crashes, workersOf(st.Holders), waitersOf(st.Queue))
	}
}

func testScanCountsEachSlot(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	a := Acquire(t, s, slotRequest("job", "a", h.shortTTL(), 2, false))
	Acquire(t, s, slotRequest("job", "b", LongTTL, 2, false))
	h.awaitExpired(t, s, a)
	crashes, err := s.Scan(Ctx(t))
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if len(crashes) != 1 || crashes[0].Holder != "a" || crashes[0].Token != a.Token {
		t.Fatalf("scan counted %+v, want a's crash alone", crashes)
	}
	if st := Status(t, s, "job"); st.Crashes != 1 || !slices.Equal(workersOf(st.Holders), []string{"b"}) {
		t.Errorf("crashes %d, holders %v; want a's crash counted, b still holding", st.Crashes, workersOf(st.Holders))
	}
}

func testStopEverySlot(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	a := Acquire(t, s, slotRequest("job", "a", LongTTL, 3, false))
	b := Acquire(t, s, slotRequest("job", "b", LongTTL, 3, false))
	note := leasestore.Note{By: "alice", Reason: "bad deploy"}
	if err := s.Stop(Ctx(t), "job", note); err != nil {
		t.Fatalf("Stop of a job with two runs: %v", err)
	}
	st := Status(t, s, "job")
	for _, l := range []*leasestore.Lease{a, b} {
		if !hasEvent(st.History, leasestore.EventStop, l.Token) {
			t.Errorf("no %s event of the run in slot %d: history %+v", leasestore.EventStop, l.Slot, st.History)
		}
		if err := s.Renew(Ctx(t), l); err != nil || l.Stop == nil || l.Stop.By != note.By {
			t.Errorf("Renew of the run in slot %d after Stop = %v with stop %+v, want the request", l.Slot, err, l.Stop)
		}
	}
	c := Acquire(t, s, slotRequest("job", "c", LongTTL, 3, false))
	if err := s.Renew(Ctx(t), c); err != nil || c.Stop != nil {
		t.Errorf("Renew of a run granted after the Stop = %v with stop %+v, want nil and none", err, c.Stop)
	}
}
