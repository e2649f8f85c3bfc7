package rules

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// The rules of slots (AcquireRequest.Slots) and of the queue of waiters
// (AcquireRequest.Wait), in the words of their cases.

func slotted(holder string, slots int) leasestore.AcquireRequest {
	q := request(holder)
	q.Slots = slots
	return q
}

func waiting(holder string, slots int) leasestore.AcquireRequest {
	q := slotted(holder, slots)
	q.Wait = true
	return q
}

// grant acquires req at now and fails the test on a refusal.
func grant(t *testing.T, r *Record, req leasestore.AcquireRequest, now time.Time) *leasestore.Lease {
	t.Helper()
	_, l, err := Acquire(r, req, now)
	if err != nil {
		t.Fatalf("acquire by %s: %v", req.Holder, err)
	}
	return l
}

// refuse acquires req at now and returns its *HeldError, failing the test
// on anything else.
func refuse(t *testing.T, r *Record, req leasestore.AcquireRequest, now time.Time) *leasestore.HeldError {
	t.Helper()
	_, l, err := Acquire(r, req, now)
	var held *leasestore.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("acquire by %s: lease %+v, error %v, want *HeldError", req.Holder, l, err)
	}
	return held
}

func TestSlots(t *testing.T) {
	t.Run("each grant takes the lowest free slot and a token of the job's one rising sequence", func(t *testing.T) {
		r := &Record{Job: "job"}
		var tokens []int64
		for i, w := range []string{"a", "b", "c"} {
			l := grant(t, r, slotted(w, 3), at(time.Duration(i)*time.Millisecond))
			if l.Slot != i {
				t.Errorf("%s got slot %d, want %d", w, l.Slot, i)
			}
			tokens = append(tokens, l.Token)
		}
		if !slices.IsSorted(tokens) || tokens[0] == tokens[1] || tokens[1] == tokens[2] || r.LastToken != tokens[2] {
			t.Errorf("tokens %v, last %d: want strictly rising, the last the job's", tokens, r.LastToken)
		}
		held := refuse(t, r, slotted("d", 3), at(time.Second))
		if held.Holder != "a" || held.Slots != 3 || held.ExpiresIn != ttl-time.Second {
			t.Errorf("refusal %+v: want every slot held, a's first to expire", held)
		}
		if _, err := Release(r, &leasestore.Lease{Job: "job", Token: tokens[1]}, leasestore.Outcome{Result: leasestore.ResultCompleted}, at(2*time.Second)); err != nil {
			t.Fatal(err)
		}
		if l := grant(t, r, slotted("d", 3), at(3*time.Second)); l.Slot != 1 || l.Token <= tokens[2] {
			t.Errorf("d got slot %d token %d, want b's freed slot 1 and a token above %d", l.Slot, l.Token, tokens[2])
		}
	})
	t.Run("another number of slots than the runs in flight is refused, naming both, until none is in flight", func(t *testing.T) {
		r := &Record{Job: "job"}
		l := grant(t, r, slotted("a", 3), t0)
		_, _, err := Acquire(r, slotted("b", 2), at(time.Second))
		var se *leasestore.SlotsError
		if !errors.As(err, &se) || se.Slots != 3 || se.Requested != 2 {
			t.Fatalf("answered %v, want *SlotsError 3 against 2", err)
		}
		if _, err := Release(r, l, leasestore.Outcome{Result: leasestore.ResultCompleted}, at(2*time.Second)); err != nil {
			t.Fatal(err)
		}
		grant(t, r, slotted("b", 2), at(3*time.Second))
		if r.slots() != 2 {
			t.Errorf("slots %d after the change, want 2", r.slots())
		}
	})
	t.Run("renewal and release are each slot's own", func(t *testing.T) {
		r := &Record{Job: "job"}
		la := grant(t, r, slotted("a", 2), t0)
		lb := grant(t, r, slotted("b", 2), t0)
		if _, err := Renew(r, la, at(20*time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := Renew(r, lb, at(ttl+time.Second)); !errors.Is(err, leasestore.ErrLeaseLost) {
			t.Errorf("b renewed after its expiry: %v", err)
		}
		if !r.Runs[0].Live(at(ttl + time.Second)) {
			t.Error("a's renewal did not keep its run live")
		}
		wrong := *lb
		wrong.Holder = "a"
		if _, err := Renew(r, &wrong, at(time.Second)); !errors.Is(err, leasestore.ErrLeaseLost) {
			t.Errorf("a renewed b's token: %v", err)
		}
	})
	t.Run("a crash of any run counts toward the job's quarantine, and the other runs keep theirs", func(t *testing.T) {
		r := &Record{Job: "job"}
		for _, w := range []string{"a", "b"} {
			q := slotted(w, 3)
			q.MaxCrashes = 2
			grant(t, r, q, t0)
		}
		lc := grant(t, r, slotted("c", 3), at(ttl-time.Second))
		_, _, err := Acquire(r, slotted("d", 3), at(ttl+time.Second))
		var qe *leasestore.QuarantinedError
		if !errors.As(err, &qe) || r.Crashes != 2 {
			t.Fatalf("answered %v with %d crashes, want both crashes counted and the job quarantined", err, r.Crashes)
		}
		if _, err := Renew(r, lc, at(ttl+2*time.Second)); err != nil {
			t.Errorf("c lost its lease to the quarantine: %v", err)
		}
	})
	t.Run("the reaper counts each crashed run once", func(t *testing.T) {
		r := &Record{Job: "job"}
		grant(t, r, slotted("a", 3), t0)
		grant(t, r, slotted("b", 3), t0)
		grant(t, r, slotted("c", 3), at(ttl-time.Second))
		_, crashes := Reap(r, at(ttl+time.Second))
		if len(crashes) != 2 || crashes[0].Holder != "a" || crashes[1].Holder != "b" || crashes[1].Crashes != 2 {
			t.Fatalf("reaped %+v, want a's and b's crashes", crashes)
		}
		if _, again := Reap(r, at(ttl+2*time.Second)); len(again) != 0 || len(r.Runs) != 1 {
			t.Errorf("reaped again %+v, runs %d", again, len(r.Runs))
		}
	})
	t.Run("every live token of a job of several slots is current; of one slot, only the last", func(t *testing.T) {
		r := &Record{Job: "job"}
		la := grant(t, r, slotted("a", 2), t0)
		lb := grant(t, r, slotted("b", 2), t0)
		for _, l := range []*leasestore.Lease{la, lb} {
			if err := CheckToken(r, l.Token, at(time.Second)); err != nil {
				t.Errorf("token %d: %v", l.Token, err)
			}
		}
		if err := CheckToken(r, la.Token, at(ttl+time.Second)); err == nil {
			t.Error("an expired run's token is current")
		}
	})
	t.Run("an operator's stop reaches every live run", func(t *testing.T) {
		r := &Record{Job: "job"}
		la := grant(t, r, slotted("a", 2), t0)
		lb := grant(t, r, slotted("b", 2), t0)
		if _, err := Stop(r, leasestore.Note{By: "oncall", Reason: "deploy"}, at(time.Second)); err != nil {
			t.Fatal(err)
		}
		for _, l := range []*leasestore.Lease{la, lb} {
			if _, err := Renew(r, l, at(2*time.Second)); err != nil || l.Stop == nil {
				t.Errorf("%s renewed: %v, stop %v", l.Holder, err, l.Stop)
			}
		}
	})
	t.Run("status shows every holder, by slot", func(t *testing.T) {
		r := &Record{Job: "job"}
		grant(t, r, slotted("a", 3), t0)
		grant(t, r, slotted("b", 3), t0)
		st := Status(r, nil, at(time.Second))
		if st.Slots != 3 || len(st.Holders) != 2 || st.Holders[1].Worker != "b" || st.Holders[1].Slot != 1 || st.Holder.Worker != "a" {
			t.Errorf("status %+v", st)
		}
	})
}

func TestQueue(t *testing.T) {
	t.Run("waiters are served in the order they started waiting, whoever asks first", func(t *testing.T) {
		r := &Record{Job: "job"}
		la := grant(t, r, waiting("a", 1), t0)
		for i, w := range []string{"b", "c", "d"} {
			if held := refuse(t, r, waiting(w, 1), at(time.Duration(i+1)*time.Second)); held.Position != i+1 || held.Waiting != i+1 {
				t.Errorf("%s waits at %d of %d, want %d", w, held.Position, held.Waiting, i+1)
			}
		}
		step, _ := Release(r, la, leasestore.Outcome{Result: leasestore.ResultCompleted}, at(5*time.Second))
		if !step.Wake {
			t.Error("the release woke nobody")
		}
		if held := refuse(t, r, waiting("d", 1), at(5*time.Second)); held.Holder != "" || held.Position != 3 {
			t.Errorf("d, third, refused with %+v: want the free slot promised to b", held)
		}
		if l := grant(t, r, waiting("b", 1), at(5*time.Second)); l.Slot != 0 {
			t.Errorf("b got slot %d", l.Slot)
		}
		if held := refuse(t, r, waiting("c", 1), at(5*time.Second)); held.Position != 1 || held.Waiting != 2 {
			t.Errorf("c after b's grant: %+v, want first of 2", held)
		}
	})
	t.Run("a request that does not wait is served only when nobody waits for the free slot", func(t *testing.T) {
		r := &Record{Job: "job"}
		la := grant(t, r, slotted("a", 1), t0)
		refuse(t, r, waiting("b", 1), at(time.Second))
		if _, err := Release(r, la, leasestore.Outcome{Result: leasestore.ResultCompleted}, at(2*time.Second)); err != nil {
			t.Fatal(err)
		}
		if held := refuse(t, r, slotted("x", 1), at(2*time.Second)); held.Position != 0 || held.Waiting != 1 {
			t.Errorf("x refused with %+v, want not queued, 1 waiting", held)
		}
		if len(r.Queue) != 1 {
			t.Errorf("a request that does not wait joined the queue: %+v", r.Queue)
		}
		grant(t, r, waiting("b", 1), at(2*time.Second))
	})
	t.Run("free slots go to as many of the oldest waiters", func(t *testing.T) {
		r := &Record{Job: "job"}
		la := grant(t, r, waiting("a", 2), t0)
		lb := grant(t, r, waiting("b", 2), t0)
		for _, w := range []string{"c", "d", "e"} {
			refuse(t, r, waiting(w, 2), at(time.Second))
		}
		for _, l := range []*leasestore.Lease{la, lb} {
			if _, err := Release(r, l, leasestore.Outcome{Result: leasestore.ResultCompleted}, at(2*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		refuse(t, r, waiting("e", 2), at(2*time.Second))
		grant(t, r, waiting("d", 2), at(2*time.Second))
		grant(t, r, waiting("c", 2), at(2*time.Second))
		if held := refuse(t, r, waiting("e", 2), at(2*time.Second)); held.Holder == "" || held.Position != 1 {
			t.Errorf("e refused with %+v, want both slots held, first in the queue", held)
		}
	})
	t.Run("a waiter that stops asking lapses after its TTL, and the next is served", func(t *testing.T) {
		r := &Record{Job: "job"}
		la := grant(t, r, waiting("a", 1), t0)
		refuse(t, r, waiting("b", 1), at(time.Second))
		refuse(t, r, waiting("c", 1), at(2*time.Second))
		if _, err := Release(r, la, leasestore.Outcome{Result: leasestore.ResultCompleted}, at(3*time.Second)); err != nil {
			t.Fatal(err)
		}
		// c keeps its place alive; b, gone, does not.
		refuse(t, r, waiting("c", 1), at(ttl))
		if st := Status(r, nil, at(ttl+500*time.Millisecond)); len(st.Queue) != 2 {
			t.Errorf("queue before b's TTL passed: %+v", st.Queue)
		}
		if st := Status(r, nil, at(ttl+time.Second)); len(st.Queue) != 1 || st.Queue[0].Worker != "c" || !st.Queue[0].Since.Equal(at(2*time.Second)) {
			t.Errorf("queue after b lapsed: %+v, want c alone, waiting since it first asked", st.Queue)
		}
		grant(t, r, waiting("c", 1), at(ttl+time.Second))
		if r.Queue != nil {
			t.Errorf("queue after c's grant: %+v", r.Queue)
		}
	})
	t.Run("a waiter asking again moves its place on only once half its TTL passed", func(t *testing.T) {
		r := &Record{Job: "job"}
		grant(t, r, waiting("a", 1), t0)
		refuse(t, r, waiting("b", 1), t0)
		before := r.Queue
		refuse(t, r, waiting("b", 1), at(ttl/2-time.Second))
		if !slices.Equal(r.Queue, before) {
			t.Errorf("asked again before half its TTL: queue %+v, want it unchanged (no write)", r.Queue)
		}
		refuse(t, r, waiting("b", 1), at(ttl/2))
		if want := at(ttl / 2).Add(ttl); !r.Queue[0].Until.Equal(want) || !r.Queue[0].Since.Equal(t0) {
			t.Errorf("asked again at half its TTL: %+v, want until %s, since unchanged", r.Queue[0], want)
		}
	})
	t.Run("a waiter that leaves wakes the next when a slot is free", func(t *testing.T) {
		r := &Record{Job: "job"}
		la := grant(t, r, waiting("a", 1), t0)
		refuse(t, r, waiting("b", 1), at(time.Second))
		refuse(t, r, waiting("c", 1), at(time.Second))
		if s := Leave(r, "b", at(2*time.Second)); s.Wake {
			t.Error("b's leaving woke waiters of a job whose slot is held")
		}
		refuse(t, r, waiting("b", 1), at(3*time.Second))
		if _, err := Release(r, la, leasestore.Outcome{Result: leasestore.ResultCompleted}, at(4*time.Second)); err != nil {
			t.Fatal(err)
		}
		if s := Leave(r, "c", at(5*time.Second)); !s.Wake {
			t.Error("c left its free slot without waking b")
		}
		grant(t, r, waiting("b", 1), at(5*time.Second))
	})
	t.Run("a waiter that gives up on its grant leaves the queue and wakes the next when a slot is free", func(t *testing.T) {
		r := &Record{Job: "job"}
		la := grant(t, r, waiting("a", 1), t0)
		refuse(t, r, waiting("b", 1), at(time.Second))
		refuse(t, r, waiting("c", 1), at(time.Second))
		if _, err := Release(r, la, leasestore.Outcome{Result: leasestore.ResultCompleted}, at(2*time.Second)); err != nil {
			t.Fatal(err)
		}
		gaveUp := leasestore.LateOutcome{Job: "job", Holder: "b", Outcome: leasestore.Outcome{Result: leasestore.ResultNotStarted}}
		if s, _ := RecordLate(r, nil, gaveUp, at(3*time.Second)); !s.Wake {
			t.Error("b gave up its turn without waking c")
		}
		if len(r.Queue) != 1 || r.Queue[0].Worker != "c" {
			t.Errorf("queue %+v, want c alone", r.Queue)
		}
	})
	t.Run("a waiter refused for another reason than a held job leaves the queue", func(t *testing.T) {
		r := &Record{Job: "job", LastSuccess: t0}
		la := grant(t, r, waiting("a", 1), t0)
		refuse(t, r, waiting("b", 1), at(time.Second))
		if _, err := Release(r, la, leasestore.Outcome{Result: leasestore.ResultCompleted}, at(2*time.Second)); err != nil {
			t.Fatal(err)
		}
		q := waiting("b", 1)
		q.MinInterval = time.Hour
		_, _, err := Acquire(r, q, at(3*time.Second))
		var soon *leasestore.TooSoonError
		if !errors.As(err, &soon) || r.Queue != nil {
			t.Errorf("answered %v, queue %+v", err, r.Queue)
		}
	})
}
