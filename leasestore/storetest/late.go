package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Part of the conformance suite (Run): RecordLate: outcomes that did not
// reach the store in time.

// late is the late outcome of l with result res.
func late(l *leasestore.Lease, res leasestore.Result) leasestore.LateOutcome {
	return leasestore.LateOutcome{Job: l.Job, Holder: l.Holder, Token: l.Token, Outcome: Outcome(res)}
}

// recordLate delivers a late outcome, failing the test on an error.
func recordLate(t *testing.T, s Client, late leasestore.LateOutcome) leasestore.Correction {
	t.Helper()
	c, err := s.RecordLate(Ctx(t), late)
	if err != nil {
		t.Fatalf("RecordLate(%s by %s token %d): %v", late.Job, late.Holder, late.Token, err)
	}
	return c
}

// countCrash lets the job's crash be counted, as the next run's Acquire or a
// reaper would.
func countCrash(t *testing.T, s Client, job string) {
	t.Helper()
	found, err := s.Scan(Ctx(t))
	if err != nil || !slices.ContainsFunc(found, func(c leasestore.Crash) bool { return c.Job == job }) {
		t.Fatalf("Scan = %+v, %v; want the crash of %s", found, err, job)
	}
}

func testRecordLateReleases(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	// Its liveness expired (its release was cut off by a partition), but
	// nobody counted the crash yet.
	l := h.crashRun(t, s, "job", "a", 3)
	c := recordLate(t, s, late(l, leasestore.ResultFailed))
	if !c.Released || c.CrashWithdrawn || c.Crashes != 0 {
		t.Errorf("Correction %+v, want Released with 0 crashes", c)
	}
	st := Status(t, s, "job")
	if st.State != leasestore.StateIdle || st.Crashes != 0 || st.LastOutcome == nil || st.LastOutcome.Result != leasestore.ResultFailed ||
		st.LastOutcome.Token != l.Token {
		t.Errorf("after RecordLate: state %s crashes %d last outcome %+v; want IDLE, 0, the late failure", st.State, st.Crashes, st.LastOutcome)
	}
	if found, err := s.Scan(Ctx(t)); err != nil || len(found) != 0 {
		t.Errorf("Scan after RecordLate = %+v, %v; want nothing to count", found, err)
	}
	if again := recordLate(t, s, late(l, leasestore.ResultFailed)); again.Released || again.CrashWithdrawn {
		t.Errorf("a second delivery = %+v, want nothing changed", again)
	}
	if after := Status(t, s, "job"); len(after.History) != len(st.History) {
		t.Errorf("a second delivery added events: %+v, then %+v", st.History, after.History)
	}
}

func testRecordLateWithdraws(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	// Three partitions in a row, each run's crash counted before its
	// outcome arrives: none is a crash, and the job is not quarantined.
	for i := range 3 {
		l := h.crashRun(t, s, "job", fmt.Sprintf("w%d", i), 3)
		countCrash(t, s, "job")
		c := recordLate(t, s, late(l, leasestore.ResultFailed))
		if c.Released || !c.CrashWithdrawn || c.QuarantineLifted || c.Crashes != 0 {
			t.Fatalf("partition %d: Correction %+v, want the crash withdrawn, 0 crashes", i, c)
		}
		st := Status(t, s, "job")
		if st.State != leasestore.StateIdle || st.Crashes != 0 || st.LastOutcome == nil || st.LastOutcome.Token != l.Token ||
			st.LastOutcome.Result != leasestore.ResultFailed {
			t.Fatalf("partition %d: state %s crashes %d last outcome %+v; want IDLE, 0, the run's real outcome", i, st.State, st.Crashes, st.LastOutcome)
		}
		if e := lastEvent(t, st); e.Kind != leasestore.EventLateOutcome || e.Token != l.Token || e.Worker != l.Holder {
			t.Errorf("partition %d: last event %+v, want %s of token %d", i, e, leasestore.EventLateOutcome, l.Token)
		}
		// Delivered again (the first answer lost): nothing more.
		if again := recordLate(t, s, late(l, leasestore.ResultFailed)); again.CrashWithdrawn || again.Crashes != 0 {
			t.Fatalf("partition %d: a second delivery = %+v, want nothing changed", i, again)
		}
	}

	// A real crash between two others still counts once the other is
	// withdrawn.
	h.crashRun(t, s, "mixed", "real1", 5)
	countCrash(t, s, "mixed")
	lost := h.crashRun(t, s, "mixed", "partitioned", 5)
	countCrash(t, s, "mixed")
	h.crashRun(t, s, "mixed", "real2", 5)
	countCrash(t, s, "mixed")
	if c := recordLate(t, s, late(lost, leasestore.ResultFailed)); !c.CrashWithdrawn || c.Crashes != 2 {
		t.Errorf("withdrawing one of three crashes: %+v, want 2 crashes left", c)
	}

	// A run that released itself as crashed had its outcome recorded in
	// time: delivered again (the release's answer lost), it withdraws
	// nothing.
	selfCrashed := Acquire(t, s, Request("self-crashed", "c", LongTTL))
	Release(t, s, selfCrashed, leasestore.ResultCrashed)
	if c := recordLate(t, s, late(selfCrashed, leasestore.ResultCrashed)); c.CrashWithdrawn || c.Crashes != 1 {
		t.Errorf("a late outcome of a run that released itself as crashed: %+v, want nothing withdrawn, 1 crash", c)
	}

	// A crash already ended by a completed run is not withdrawn again.
	old := h.crashRun(t, s, "reset", "a", 5)
	countCrash(t, s, "reset")
	Release(t, s, Acquire(t, s, Request("reset", "b", LongTTL)), leasestore.ResultCompleted)
	if c := recordLate(t, s, late(old, leasestore.ResultFailed)); c.CrashWithdrawn || c.Crashes != 0 {
		t.Errorf("a late outcome of a crash a completed run already ended: %+v, want nothing withdrawn", c)
	}
	if st := Status(t, s, "reset"); st.LastOutcome == nil || st.LastOutcome.Result != leasestore.ResultCompleted {
		t.Errorf("last outcome %+v, want the later completed run's, not the late one", st.LastOutcome)
	}
}

func testRecordLateLiftsQuarantine(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	h.crashRun(t, s, "job", "real", 2)
	countCrash(t, s, "job")
	lost := h.crashRun(t, s, "job", "partitioned", 2)
	countCrash(t, s, "job")
	if st := Status(t, s, "job"); st.State != leasestore.StateQuarantined {
		t.Fatalf("state %s, want QUARANTINED after two counted crashes with max-crashes 2", st.State)
	}
	waiter := client(t, h.Fixture)
	sub, err := waiter.Subscribe(Ctx(t), "job", "")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	defer sub.Close()
	c := recordLate(t, s, late(lost, leasestore.ResultFailed))
	if !c.CrashWithdrawn || !c.QuarantineLifted || c.Crashes != 1 {
		t.Fatalf("Correction %+v, want the crash withdrawn and the quarantine lifted, 1 crash left", c)
	}
	select {
	case <-sub.Released():
	case <-time.After(HangGuard):
		t.Fatalf("no notification within %s after the quarantine was lifted", HangGuard)
	}
	st := Status(t, s, "job")
	if st.State != leasestore.StateIdle || st.Quarantine != nil || st.Crashes != 1 {
		t.Errorf("state %s quarantine %+v crashes %d, want IDLE, none, 1", st.State, st.Quarantine, st.Crashes)
	}
	if !slices.ContainsFunc(st.History, func(e leasestore.Event) bool {
		return e.Kind == leasestore.EventUnquarantine && e.Worker == leasestore.ByLeasectl
	}) {
		t.Errorf("history %+v has no %s by %s", st.History, leasestore.EventUnquarantine, leasestore.ByLeasectl)
	}
	if list, err := s.Quarantined(Ctx(t)); err != nil || len(list) != 0 {
		t.Errorf("Quarantined() = %+v, %v; want none", list, err)
	}
	Acquire(t, s, Request("job", "next", LongTTL))

	// An operator's quarantine stays.
	h.crashRun(t, s, "manual", "real", 5)
	countCrash(t, s, "manual")
	lost = h.crashRun(t, s, "manual", "partitioned", 5)
	countCrash(t, s, "manual")
	if err := s.Quarantine(Ctx(t), "manual", leasestore.Note{By: "alice", Reason: "looking into it"}); err != nil {
		t.Fatalf("Quarantine: %v", err)
	}
	if c := recordLate(t, s, late(lost, leasestore.ResultFailed)); !c.CrashWithdrawn || c.QuarantineLifted {
		t.Errorf("Correction %+v, want the crash withdrawn and the operator's quarantine kept", c)
	}
	if st := Status(t, s, "manual"); st.State != leasestore.StateQuarantined || st.Quarantine.By != "alice" {
		t.Errorf("state %s quarantine %+v, want alice's quarantine kept", st.State, st.Quarantine)
	}
}

func testRecordLateCompleted(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	h.crashRun(t, s, "job", "c1", 10)
	countCrash(t, s, "job")
	lost := h.crashRun(t, s, "job", "completed-in-partition", 10)
	countCrash(t, s, "job")
	h.crashRun(t, s, "job", "c3", 10)
	countCrash(t, s, "job")
	before := Status(t, s, "job")
	out := late(lost, leasestore.ResultCompleted)
	c := recordLate(t, s, out)
	if !c.CrashWithdrawn || c.Crashes != 1 {
		t.Fatalf("Correction %+v, want the crash withdrawn and 1 crash left: only c3's came after a completed run", c)
	}
	st := Status(t, s, "job")
	if st.Crashes != 1 || st.LastOutcome == nil || st.LastOutcome.Token != lost.Token || st.LastOutcome.Result != leasestore.ResultCompleted {
		t.Errorf("crashes %d last outcome %+v, want 1 and the late completion", st.Crashes, st.LastOutcome)
	}
	if want := lost.GrantedAt.Add(out.Duration); !st.LastSuccess.Equal(want) || !before.LastSuccess.IsZero() {
		t.Errorf("last success %s (before %s), want the run's start + duration %s", st.LastSuccess, before.LastSuccess, want)
	}
}

func testRecordLateAbandoned(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	// The grant happened; its answer never reached its holder, who gave up.
	ghost := Acquire(t, s, Request("job", "ghost", LongTTL))
	gaveUp := leasestore.LateOutcome{Job: "job", Holder: "ghost", Outcome: Outcome(leasestore.ResultNotStarted)}
	if c := recordLate(t, s, gaveUp); !c.Released {
		t.Fatalf("Correction %+v, want the ghost grant released", c)
	}
	st := Status(t, s, "job")
	if st.State != leasestore.StateIdle || st.Holder != nil || st.Crashes != 0 || st.LastOutcome == nil ||
		st.LastOutcome.Token != ghost.Token || st.LastOutcome.Result != leasestore.ResultNotStarted {
		t.Errorf("after the holder gave up: state %s holder %+v crashes %d last outcome %+v; want IDLE, no crash, not-started",
			st.State, st.Holder, st.Crashes, st.LastOutcome)
	}
	// Given up again (the first answer lost too): nothing more.
	if again := recordLate(t, s, gaveUp); again.Released || again.CrashWithdrawn {
		t.Errorf("giving up again = %+v, want nothing changed", again)
	}
	if after := Status(t, s, "job"); len(after.History) != len(st.History) {
		t.Errorf("giving up again added events: %+v, then %+v", st.History, after.History)
	}
	// Its request, arriving again late, grants nothing.
	if l, err := s.Acquire(Ctx(t), Request("job", "ghost", LongTTL)); !errors.Is(err, leasestore.ErrLeaseLost) {
		t.Fatalf("Acquire by the holder that gave up = %+v, %v; want ErrLeaseLost", l, err)
	}
	Release(t, s, Acquire(t, s, Request("job", "next", LongTTL)), leasestore.ResultCompleted)

	// Given up before the grant arrived: the request arrives afterwards.
	if c := recordLate(t, s, leasestore.LateOutcome{Job: "early", Holder: "slow", Outcome: Outcome(leasestore.ResultNotStarted)}); c.Released || c.CrashWithdrawn {
		t.Errorf("giving up on a job never granted: %+v, want nothing released or withdrawn", c)
	}
	if _, err := s.Acquire(Ctx(t), Request("early", "slow", LongTTL)); !errors.Is(err, leasestore.ErrLeaseLost) {
		t.Errorf("Acquire arriving after its holder gave up = %v, want ErrLeaseLost", err)
	}
	Acquire(t, s, Request("early", "other", LongTTL))

	// Given up once the ghost's crash was counted: withdrawn.
	h.crashRun(t, s, "counted", "ghost", 3)
	countCrash(t, s, "counted")
	c := recordLate(t, s, leasestore.LateOutcome{Job: "counted", Holder: "ghost", Outcome: Outcome(leasestore.ResultNotStarted)})
	if !c.CrashWithdrawn || c.Crashes != 0 {
		t.Errorf("Correction %+v, want the ghost's crash withdrawn", c)
	}
}
