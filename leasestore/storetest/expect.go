package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// testExpect holds a store to Expect and Overdue (docs/semantics.md,
// Expect): the expectation kept on the record and shown by Status, its
// since kept while the period and grace are unchanged, set with a grant
// (last writer wins) or by an operator, cleared; a job overdue once the
// store's clock is past its last success (or, never having succeeded, the
// time its expectation was set) plus every and grace; a success moving the
// due time, a failure not.
func testExpect(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	alice := leasestore.Note{By: "alice", Reason: "nightly"}
	hourly := &leasestore.Expectation{Every: time.Hour, Grace: 10 * time.Minute}
	// A millisecond's expectation is overdue a millisecond after its start.
	soon := &leasestore.Expectation{Every: time.Millisecond}

	if err := s.Expect(Ctx(t), "idle", nil, alice); err != nil {
		t.Fatalf("clearing the expectation of a job the store never saw: %v", err)
	}
	if err := s.Expect(Ctx(t), "nightly", hourly, alice); err != nil {
		t.Fatalf("Expect: %v", err)
	}
	st := Status(t, s, "nightly")
	set := wantExpect(t, st, hourly)
	if st.Overdue() {
		t.Errorf("overdue an instant after an expectation of an hour was set")
	}
	if e := lastEvent(t, st); e.Kind != leasestore.EventExpect || e.Worker != alice.By ||
		h.CommonHistoryWords && e.Detail != "by alice: every 1h0m0s grace 10m0s: nightly" {
		t.Errorf("last event %+v, want %s by %s", e, leasestore.EventExpect, alice.By)
	}
	if jobs, err := s.Jobs(Ctx(t), "", 0); err != nil || fmt.Sprint(jobs) != "[nightly]" {
		t.Errorf("Jobs() = %v, %v; want the job with an expectation alone", jobs, err)
	}
	if err := s.Expect(Ctx(t), "nightly", hourly, alice); err != nil {
		t.Fatal(err)
	}
	if again := wantExpect(t, Status(t, s, "nightly"), hourly); !again.Equal(set) {
		t.Errorf("setting the same expectation again moved its since from %v to %v", set, again)
	}
	wantOverdue(t, s, nil)

	// Never succeeded: overdue every + grace after the expectation was set.
	if err := s.Expect(Ctx(t), "nightly", soon, alice); err != nil {
		t.Fatal(err)
	}
	since := wantExpect(t, Status(t, s, "nightly"), soon)
	if !since.After(set) {
		t.Errorf("a new period kept the since of the old one (%v)", since)
	}
	o := awaitOverdue(t, s, "nightly")
	if !o.LastSuccess.IsZero() || !o.Due.Equal(since.Add(time.Millisecond)) || o.Expect.Every != soon.Every {
		t.Errorf("overdue %+v, want due a millisecond after %v, never succeeded", o, since)
	}

	// A grant records the run's expectation; its success moves the due time.
	req := Request("nightly", "w1", LongTTL)
	req.Expect = hourly
	l := Acquire(t, s, req)
	wantExpect(t, Status(t, s, "nightly"), hourly)
	wantOverdue(t, s, nil)
	Release(t, s, l, leasestore.ResultCompleted)
	st = Status(t, s, "nightly")
	if st.LastSuccess.IsZero() || st.Overdue() {
		t.Fatalf("after a success: last success %v, overdue %v; want a success, not overdue", st.LastSuccess, st.Overdue())
	}
	req.Expect, req.Holder = soon, "w2"
	l = Acquire(t, s, req)
	Release(t, s, l, leasestore.ResultCompleted)
	success := Status(t, s, "nightly").LastSuccess
	if o := awaitOverdue(t, s, "nightly"); !o.LastSuccess.Equal(success) || !o.Due.Equal(success.Add(time.Millisecond)) {
		t.Errorf("overdue %+v, want due a millisecond after the last success %v", o, success)
	}
	// A failure is no success: the job stays overdue.
	req.Expect, req.Holder = nil, "w3"
	l = Acquire(t, s, req)
	Release(t, s, l, leasestore.ResultFailed)
	if o := awaitOverdue(t, s, "nightly"); !o.LastSuccess.Equal(success) {
		t.Errorf("a failure moved the last success from %v to %v", success, o.LastSuccess)
	}
	if x := Status(t, s, "nightly").Expect; x == nil || x.Every != soon.Every {
		t.Errorf("a grant without an expectation left %+v, want the job's kept", x)
	}

	// Cleared: not overdue; clearing again records nothing.
	if err := s.Expect(Ctx(t), "nightly", nil, alice); err != nil {
		t.Fatal(err)
	}
	st = Status(t, s, "nightly")
	if st.Expect != nil || st.Overdue() || lastEvent(t, st).Kind != leasestore.EventExpect {
		t.Errorf("after clearing: expectation %+v, last event %+v", st.Expect, lastEvent(t, st))
	}
	wantOverdue(t, s, nil)
	if err := s.Expect(Ctx(t), "nightly", nil, alice); err != nil {
		t.Fatal(err)
	}
	if again := Status(t, s, "nightly"); len(again.History) != len(st.History) {
		t.Errorf("clearing a cleared expectation recorded %+v", lastEvent(t, again))
	}
}

// wantExpect checks that st shows expectation x, set by the store's clock
// no later than st.Now, and returns since when it holds.
func wantExpect(t *testing.T, st *leasestore.JobStatus, x *leasestore.Expectation) time.Time {
	t.Helper()
	got := st.Expect
	if got == nil || got.Every != x.Every || got.Grace != x.Grace || got.Since.IsZero() || got.Since.After(st.Now) {
		t.Fatalf("status of %s shows expectation %+v at %v, want every %s grace %s, set by then", st.Job, got, st.Now, x.Every, x.Grace)
	}
	return got.Since
}

// wantOverdue checks that Overdue lists jobs, in order.
func wantOverdue(t *testing.T, s Client, jobs []string) {
	t.Helper()
	list, err := s.Overdue(Ctx(t))
	if err != nil {
		t.Fatalf("Overdue: %v", err)
	}
	var got []string
	for _, o := range list {
		got = append(got, o.Job)
	}
	if fmt.Sprint(got) != fmt.Sprint(jobs) {
		t.Errorf("Overdue() lists %v, want %v", got, jobs)
	}
}

// awaitOverdue waits until Overdue lists job alone, and returns its entry,
// after checking that the entry is what the job's status says.
func awaitOverdue(t *testing.T, s Client, job string) leasestore.Overdue {
	t.Helper()
	for guard := time.Now().Add(HangGuard); ; time.Sleep(time.Millisecond) {
		list, err := s.Overdue(Ctx(t))
		if err != nil {
			t.Fatalf("Overdue: %v", err)
		}
		if len(list) > 1 || len(list) == 1 && list[0].Job != job {
			t.Fatalf("Overdue() = %+v, want %s alone", list, job)
		}
		if len(list) == 1 {
			o := list[0]
			st := Status(t, s, job)
			if !st.Overdue() || st.Expect == nil || !sameExpectation(*st.Expect, o.Expect) ||
				!o.Now.After(o.Due) || !o.Due.Equal(st.Expect.Due(st.LastSuccess)) {
				t.Fatalf("Overdue() lists %+v; the job's status: expectation %+v, last success %v, overdue %v",
					o, st.Expect, st.LastSuccess, st.Overdue())
			}
			return o
		}
		if time.Now().After(guard) {
			t.Fatalf("%s not overdue after %s: %+v", job, HangGuard, Status(t, s, job).Expect)
		}
	}
}

// sameExpectation reports whether x and y are the same expectation, set at
// the same instant.
func sameExpectation(x, y leasestore.Expectation) bool {
	return x.Same(y) && x.Since.Equal(y.Since)
}
