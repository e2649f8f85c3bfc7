package storetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/leasectl/leasectl/leasestore"
)

// Part of the conformance suite (Run): the job's history: bounded, and in
// the same words on every store.

func testHistoryBounded(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	var last *leasestore.Lease
	for i := range leasestore.HistoryLimit {
		last = Acquire(t, s, Request("job", fmt.Sprintf("w%d", i), LongTTL))
		Release(t, s, last, leasestore.ResultCompleted)
	}
	st := Status(t, s, "job")
	if len(st.History) != leasestore.HistoryLimit {
		t.Fatalf("history has %d events, want %d", len(st.History), leasestore.HistoryLimit)
	}
	for i := 1; i < len(st.History); i++ {
		if st.History[i].At.Before(st.History[i-1].At) {
			t.Errorf("history not oldest first at %d: %s before %s", i, st.History[i].At, st.History[i-1].At)
		}
	}
	if e := lastEvent(t, st); e.Kind != leasestore.EventReleased || e.Token != last.Token || e.Worker != last.Holder {
		t.Errorf("newest event %+v, want the release of token %d", e, last.Token)
	}
	if first := st.History[0]; first.Worker != fmt.Sprintf("w%d", leasestore.HistoryLimit/2) || first.Kind != leasestore.EventAcquired {
		t.Errorf("oldest kept event %+v, want the acquire of w%d", first, leasestore.HistoryLimit/2)
	}
}

// testHistoryDetails holds every store to the same words in every history
// event (docs/semantics.md, History events), so that status and quarantine
// show read alike whatever the store.
func testHistoryDetails(t *testing.T, h fixture) {
	if !h.CommonHistoryWords {
		t.Skip("the store does not declare Abilities.CommonHistoryWords yet")
	}
	s := client(t, h.Fixture)
	want := func(what string, kind leasestore.EventKind, worker string, token int64, detail string) {
		t.Helper()
		e := lastEvent(t, Status(t, s, "job"))
		if e.Kind != kind || e.Worker != worker || e.Token != token || e.Detail != detail {
			t.Errorf("%s: last event %+v, want %s by %q, token %d, detail %q", what, e, kind, worker, token, detail)
		}
	}
	l := Acquire(t, s, Request("job", "w1", LongTTL))
	want("a grant", leasestore.EventAcquired, "w1", l.Token, "attempt 1")
	out := Outcome(leasestore.ResultFailed)
	out.Reason = "max-runtime"
	if err := s.Release(Ctx(t), l, out); err != nil {
		t.Fatal(err)
	}
	want("a release", leasestore.EventReleased, "w1", l.Token, out.Detail())

	crashed := h.crashRun(t, s, "job", "w2", 2)
	if _, err := s.Scan(Ctx(t)); err != nil {
		t.Fatal(err)
	}
	want("a crash found by scan", leasestore.EventCrashed, "w2", crashed.Token, "supervisor vanished: liveness expired, found by scan")

	note := leasestore.Note{By: "alice@ops-1", Reason: "bad input"}
	if err := s.Quarantine(Ctx(t), "job", note); err != nil {
		t.Fatal(err)
	}
	want("an operator's quarantine", leasestore.EventQuarantined, note.By, 0, "by alice@ops-1: bad input")
	note.Reason = "input fixed"
	if err := s.ReleaseQuarantine(Ctx(t), "job", note); err != nil {
		t.Fatal(err)
	}
	want("a release from quarantine", leasestore.EventUnquarantine, note.By, 0, "by alice@ops-1: input fixed")

	first := h.crashRun(t, s, "job", "w3", 2)
	l = Acquire(t, s, Request("job", "w4", LongTTL))
	st := Status(t, s, "job")
	if i := slices.IndexFunc(st.History, func(e leasestore.Event) bool { return e.Kind == leasestore.EventCrashed && e.Token == first.Token }); i < 0 ||
		st.History[i].Detail != "supervisor vanished: liveness expired, found by acquire" {
		t.Errorf("history %+v: want w3's crash, found by acquire", st.History)
	}
	Release(t, s, l, leasestore.ResultCompleted)

	h.crashRun(t, s, "job", "w5", 2)
	last := h.crashRun(t, s, "job", "w6", 2) // counts w5's crash, then crashes itself
	if _, err := s.Scan(Ctx(t)); err != nil {
		t.Fatal(err)
	}
	want("a quarantine at the threshold", leasestore.EventQuarantined, "w6", last.Token, "by leasectl: 2 consecutive crashes")
}
