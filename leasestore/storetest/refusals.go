package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Part of the conformance suite (Run): what Acquire refuses: quarantine,
// min-interval, regions, deadlines.

func testQuarantineThreshold(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	// The detector's own threshold (100) must not matter: the crashed run
	// was started with 2.
	detector := Request("job", "detector", LongTTL)
	detector.MaxCrashes = 100

	h.crashRun(t, s, "job", "c1", 2)
	found, err := s.Scan(Ctx(t))
	if err != nil || len(found) != 1 || found[0].Crashes != 1 || found[0].Quarantined {
		t.Fatalf("first crash: Scan = %+v, %v; want one crash, not quarantined", found, err)
	}
	last := h.crashRun(t, s, "job", "c2", 2)
	_, err = s.Acquire(Ctx(t), detector)
	q := errorAs[*leasestore.QuarantinedError](t, err)
	if q.Job != "job" || q.Crashes != 2 || q.By != "leasectl" || q.LastHolder != "c2" || q.LastHost != "host-c2" ||
		q.Since.IsZero() || !strings.Contains(q.Reason, "2") {
		t.Errorf("QuarantinedError %+v, want job quarantined by leasectl after 2 crashes of c2", q.Quarantine)
	}
	st := Status(t, s, "job")
	if st.State != leasestore.StateQuarantined || st.Crashes != 2 || st.Holder != nil {
		t.Errorf("status %s crashes %d holder %+v, want %s with 2 crashes and no holder", st.State, st.Crashes, st.Holder, leasestore.StateQuarantined)
	}
	if !hasEvent(st.History, leasestore.EventCrashed, last.Token) || !hasEvent(st.History, leasestore.EventQuarantined, last.Token) {
		t.Errorf("history %+v lacks the crash and the quarantine of token %d", st.History, last.Token)
	}
	list, err := s.Quarantined(Ctx(t))
	if err != nil || len(list) != 1 || list[0].Job != "job" || list[0].Crashes != 2 {
		t.Errorf("Quarantined() = %+v, %v; want the job with 2 crashes", list, err)
	}
	if c, err := s.Counts(Ctx(t)); err != nil || c.Quarantined != 1 || c.InFlight != 0 {
		t.Errorf("Counts() = %+v, %v; want 1 quarantined, 0 in flight", c, err)
	}
	_, err = s.Acquire(Ctx(t), detector)
	errorAs[*leasestore.QuarantinedError](t, err)

	note := leasestore.Note{By: "oncall", Reason: "fixed the input"}
	if err := s.ReleaseQuarantine(Ctx(t), "job", note); err != nil {
		t.Fatalf("ReleaseQuarantine: %v", err)
	}
	st = Status(t, s, "job")
	if st.State != leasestore.StateIdle || st.Crashes != 0 || st.Quarantine != nil {
		t.Errorf("after release: state %s crashes %d quarantine %+v, want %s, 0, none", st.State, st.Crashes, st.Quarantine, leasestore.StateIdle)
	}
	if e := lastEvent(t, st); e.Kind != leasestore.EventUnquarantine || !strings.Contains(e.Detail, note.By) || !strings.Contains(e.Detail, note.Reason) {
		t.Errorf("last event %+v, want %s naming %q and %q", e, leasestore.EventUnquarantine, note.By, note.Reason)
	}
	if err := s.ReleaseQuarantine(Ctx(t), "job", note); !errors.Is(err, leasestore.ErrNotQuarantined) {
		t.Errorf("second ReleaseQuarantine = %v, want ErrNotQuarantined", err)
	}
	if list, err := s.Quarantined(Ctx(t)); err != nil || len(list) != 0 {
		t.Errorf("Quarantined() after release = %+v, %v; want none", list, err)
	}
	Acquire(t, s, detector)
}

func testManualQuarantine(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	first := leasestore.Note{By: "alice", Reason: "bad deploy"}
	if err := s.Quarantine(Ctx(t), "never-seen", first); err != nil {
		t.Fatalf("Quarantine of a job the store never saw: %v", err)
	}
	_, err := s.Acquire(Ctx(t), Request("never-seen", "a", LongTTL))
	q := errorAs[*leasestore.QuarantinedError](t, err)
	if q.By != first.By || q.Reason != first.Reason || q.Since.IsZero() {
		t.Errorf("QuarantinedError %+v, want by %q reason %q", q.Quarantine, first.By, first.Reason)
	}

	time.Sleep(10 * time.Millisecond)
	second := leasestore.Note{By: "bob", Reason: "still bad"}
	if err := s.Quarantine(Ctx(t), "never-seen", second); err != nil {
		t.Fatalf("second Quarantine: %v", err)
	}
	st := Status(t, s, "never-seen")
	if st.State != leasestore.StateQuarantined || st.Quarantine == nil || !st.Quarantine.Since.Equal(q.Since) || st.Quarantine.Reason != second.Reason {
		t.Errorf("after a second Quarantine: %+v, want since %s kept and reason %q", st.Quarantine, q.Since, second.Reason)
	}
	if e := lastEvent(t, st); e.Kind != leasestore.EventQuarantined || !strings.Contains(e.Detail, second.By) || !strings.Contains(e.Detail, second.Reason) {
		t.Errorf("last event %+v, want %s naming %q and %q", e, leasestore.EventQuarantined, second.By, second.Reason)
	}
	if err := s.ReleaseQuarantine(Ctx(t), "other", first); !errors.Is(err, leasestore.ErrNotQuarantined) {
		t.Errorf("ReleaseQuarantine of a job never quarantined = %v, want ErrNotQuarantined", err)
	}

	// A crash that reaches its run's threshold under an operator's
	// quarantine did not quarantine the job: the operator's stays.
	req := Request("crashed", "c1", LongTTL)
	req.MaxCrashes = 2
	Release(t, s, Acquire(t, s, req), leasestore.ResultCrashed)
	crashed := h.crashRun(t, s, "crashed", "c2", 2)
	if err := s.Quarantine(Ctx(t), "crashed", first); err != nil {
		t.Fatalf("Quarantine: %v", err)
	}
	found, err := s.Scan(Ctx(t))
	if err != nil || len(found) != 1 || found[0].Token != crashed.Token || found[0].Crashes != 2 || found[0].Quarantined {
		t.Errorf("Scan under an operator's quarantine = %+v, %v; want the crash of token %d, 2 crashes, not the one that quarantined the job",
			found, err, crashed.Token)
	}
	if st := Status(t, s, "crashed"); st.Quarantine == nil || st.Quarantine.By != first.By {
		t.Errorf("quarantine after the crash was counted: %+v, want %s's kept", st.Quarantine, first.By)
	}
}

func testMinInterval(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	Release(t, s, Acquire(t, s, Request("job", "a", LongTTL)), leasestore.ResultCompleted)
	before := Status(t, s, "job")

	req := Request("job", "b", LongTTL)
	req.MinInterval = time.Hour
	_, err := s.Acquire(Ctx(t), req)
	soon := errorAs[*leasestore.TooSoonError](t, err)
	if soon.Job != "job" || soon.MinInterval != time.Hour || !soon.LastSuccess.Equal(before.LastSuccess) ||
		soon.Age < 0 || soon.Age > time.Minute {
		t.Errorf("TooSoonError %+v, want last success %s, age under a minute", soon, before.LastSuccess)
	}
	if after := Status(t, s, "job"); after.Attempts != before.Attempts || after.LastToken != before.LastToken ||
		len(after.History) != len(before.History) {
		t.Errorf("a too-soon refusal wrote: before %+v, after %+v", before, after)
	}

	time.Sleep(50 * time.Millisecond)
	req.MinInterval = 10 * time.Millisecond
	l := Acquire(t, s, req)
	Release(t, s, l, leasestore.ResultFailed)
	req.MinInterval = time.Hour
	_, err = s.Acquire(Ctx(t), req)
	errorAs[*leasestore.TooSoonError](t, err)

	req.Job = "never-completed"
	Acquire(t, s, req)
}

// testRegion checks regional isolation: the first grant that
// names a region records it, and requests from other regions are refused
// without changing anything, whether the job is held or free.
func testRegion(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	inRegion := func(job, worker, region string) leasestore.AcquireRequest {
		req := Request(job, worker, LongTTL)
		req.Region = region
		return req
	}
	wantRegionError := func(t *testing.T, err error, job, region, requested string) {
		t.Helper()
		e := errorAs[*leasestore.RegionError](t, err)
		if e.Job != job || e.Region != region || e.Requested != requested {
			t.Errorf("RegionError %+v, want job %s of region %s asked from %s", e, job, region, requested)
		}
	}

	held := Acquire(t, s, inRegion("job", "a", "us-east-1"))
	if st := Status(t, s, "job"); st.Region != "us-east-1" {
		t.Fatalf("region after the first grant = %q, want us-east-1", st.Region)
	}
	before := Status(t, s, "job")
	_, err := s.Acquire(Ctx(t), inRegion("job", "b", "eu-west-1"))
	wantRegionError(t, err, "job", "us-east-1", "eu-west-1")
	Release(t, s, held, leasestore.ResultFailed)

	_, err = s.Acquire(Ctx(t), inRegion("job", "b", "eu-west-1"))
	wantRegionError(t, err, "job", "us-east-1", "eu-west-1")
	if after := Status(t, s, "job"); after.Attempts != before.Attempts || after.LastToken != before.LastToken ||
		len(after.History) != len(before.History)+1 || after.Region != "us-east-1" {
		t.Errorf("a refusal for another region wrote: before %+v, after %+v", before, after)
	}
	Release(t, s, Acquire(t, s, inRegion("job", "c", "us-east-1")), leasestore.ResultCompleted)
	// A request naming no region is not restricted, and changes no region.
	Acquire(t, s, inRegion("job", "d", ""))
	if st := Status(t, s, "job"); st.Region != "us-east-1" {
		t.Errorf("region after a grant naming none = %q, want us-east-1 kept", st.Region)
	}

	// A job granted before without a region takes the first one named.
	Release(t, s, Acquire(t, s, inRegion("free", "a", "")), leasestore.ResultCompleted)
	if st := Status(t, s, "free"); st.Region != "" {
		t.Errorf("region of a job never granted with one = %q, want none", st.Region)
	}
	Acquire(t, s, inRegion("free", "b", "eu-west-1"))
	if st := Status(t, s, "free"); st.Region != "eu-west-1" {
		t.Errorf("region after the first grant naming one = %q, want eu-west-1", st.Region)
	}
}

// testDeadline checks the hard deadline (ttl_deadline): past it, Acquire refuses,
// after counting a crash it found; before it, and for the holder of the
// live lease, Acquire grants as usual.
func testDeadline(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	withDeadline := func(worker string, ttl time.Duration, deadline time.Time) leasestore.AcquireRequest {
		req := Request("job", worker, ttl)
		req.Deadline = deadline
		return req
	}
	future := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	past := time.Now().Add(-time.Minute).Truncate(time.Millisecond)

	l := Acquire(t, s, withDeadline("a", LongTTL, future))
	if again := Acquire(t, s, withDeadline("a", LongTTL, past)); again.Token != l.Token {
		t.Errorf("the holder's own Acquire past the deadline = token %d, want its lease %d back", again.Token, l.Token)
	}
	Release(t, s, l, leasestore.ResultFailed)

	before := Status(t, s, "job")
	_, err := s.Acquire(Ctx(t), withDeadline("b", LongTTL, past))
	e := errorAs[*leasestore.DeadlineError](t, err)
	if e.Job != "job" || !e.Deadline.Equal(past) || !e.Now.After(past) {
		t.Errorf("DeadlineError %+v, want job with deadline %s and the store's clock after it", e, past)
	}
	if after := Status(t, s, "job"); after.Attempts != before.Attempts || after.LastToken != before.LastToken ||
		len(after.History) != len(before.History) {
		t.Errorf("a refusal past the deadline wrote: before %+v, after %+v", before, after)
	}

	crashed := h.crashRun(t, s, "late", "c", 3)
	_, err = s.Acquire(Ctx(t), leasestore.AcquireRequest{Job: "late", Holder: "d", TTL: LongTTL, EvidenceTTL: EvidenceTTL, MaxCrashes: 3, Deadline: past})
	errorAs[*leasestore.DeadlineError](t, err)
	if st := Status(t, s, "late"); st.Crashes != 1 || !hasEvent(st.History, leasestore.EventCrashed, crashed.Token) {
		t.Errorf("after a refusal past the deadline: crashes %d, history %+v; want the crash of token %d counted",
			st.Crashes, st.History, crashed.Token)
	}
}
