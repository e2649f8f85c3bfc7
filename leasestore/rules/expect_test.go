package rules

import (
	"slices"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

func hourly(grace time.Duration) *leasestore.Expectation {
	return &leasestore.Expectation{Every: time.Hour, Grace: grace}
}

func TestOverdue(t *testing.T) {
	oncall := leasestore.Note{By: "oncall", Reason: "nightly"}
	tests := []struct {
		name   string
		record func() *Record
		now    time.Time
		due    time.Time // zero: no expectation
		over   bool
	}{
		{"a job without an expectation is never overdue",
			func() *Record { return &Record{Job: "job", LastSuccess: t0} }, at(100 * time.Hour), time.Time{}, false},
		{"a job that never succeeded is due every + grace after the expectation was set",
			func() *Record { r := &Record{Job: "job"}; Expect(r, hourly(10*time.Minute), oncall, t0); return r },
			at(70*time.Minute + time.Microsecond), at(70 * time.Minute), true},
		{"at its due time exactly it is not overdue yet",
			func() *Record { r := &Record{Job: "job"}; Expect(r, hourly(10*time.Minute), oncall, t0); return r },
			at(70 * time.Minute), at(70 * time.Minute), false},
		{"a success moves the due time to every + grace after it",
			func() *Record {
				r := &Record{Job: "job"}
				Expect(r, hourly(10*time.Minute), oncall, t0)
				r.LastSuccess = at(50 * time.Minute)
				return r
			}, at(2 * time.Hour), at(2 * time.Hour), false},
		{"a success older than the expectation counts from the success, not from the setting",
			func() *Record {
				r := &Record{Job: "job", LastSuccess: at(-2 * time.Hour)}
				Expect(r, hourly(0), oncall, t0)
				return r
			}, at(time.Second), at(-time.Hour), true},
		{"setting the same period and grace again keeps when it was set",
			func() *Record {
				r := &Record{Job: "job"}
				Expect(r, hourly(0), oncall, t0)
				Expect(r, hourly(0), oncall, at(30*time.Minute))
				return r
			}, at(61 * time.Minute), at(time.Hour), true},
		{"a new period restarts the job's first period",
			func() *Record {
				r := &Record{Job: "job"}
				Expect(r, hourly(0), oncall, t0)
				Expect(r, &leasestore.Expectation{Every: 2 * time.Hour}, oncall, at(30*time.Minute))
				return r
			}, at(2 * time.Hour), at(150 * time.Minute), false},
		{"a cleared expectation is never overdue",
			func() *Record {
				r := &Record{Job: "job"}
				Expect(r, hourly(0), oncall, t0)
				Expect(r, nil, oncall, at(time.Minute))
				return r
			}, at(100 * time.Hour), time.Time{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.record()
			if due := Due(r); !due.Equal(tc.due) {
				t.Errorf("due %v, want %v", due, tc.due)
			}
			o := Overdue(r, tc.now)
			if (o != nil) != tc.over {
				t.Fatalf("overdue %+v, want overdue %v", o, tc.over)
			}
			st := Status(r, nil, tc.now)
			if st.Overdue() != tc.over {
				t.Errorf("status overdue %v, want %v", st.Overdue(), tc.over)
			}
			if o != nil && (o.Job != "job" || !o.Due.Equal(tc.due) || !o.Now.Equal(tc.now)) {
				t.Errorf("overdue %+v, want job, due %v, now %v", o, tc.due, tc.now)
			}
		})
	}
}

func TestExpect(t *testing.T) {
	oncall := leasestore.Note{By: "oncall", Reason: "nightly"}
	t.Run("setting records who, the period and why", func(t *testing.T) {
		r := &Record{Job: "job"}
		s := Expect(r, hourly(10*time.Minute), oncall, t0)
		if !r.Known() {
			t.Error("a job with an expectation is not known")
		}
		want := []leasestore.Event{{At: t0, Kind: leasestore.EventExpect, Worker: "oncall",
			Detail: "by oncall: every 1h0m0s grace 10m0s: nightly"}}
		if !slices.Equal(s.Events, want) {
			t.Errorf("events %+v, want %+v", s.Events, want)
		}
		if r.Expect == nil || !r.Expect.Since.Equal(t0) {
			t.Errorf("expectation %+v, want one since %v", r.Expect, t0)
		}
	})
	t.Run("clearing records it; clearing none changes nothing", func(t *testing.T) {
		r := &Record{Job: "job"}
		Expect(r, hourly(0), oncall, t0)
		if s := Expect(r, nil, oncall, at(time.Minute)); !slices.Equal(kinds(s), []leasestore.EventKind{leasestore.EventExpect}) || r.Expect != nil {
			t.Errorf("clearing: events %v, expectation %+v", kinds(s), r.Expect)
		}
		if s := Expect(r, nil, oncall, at(2*time.Minute)); len(s.Events) != 0 {
			t.Errorf("clearing none: events %v, want none", kinds(s))
		}
	})
	t.Run("a grant records the run's expectation; a grant without one keeps the job's", func(t *testing.T) {
		r := &Record{Job: "job"}
		req := request("w1")
		req.Expect = hourly(time.Minute)
		if _, _, err := Acquire(r, req, t0); err != nil {
			t.Fatal(err)
		}
		if r.Expect == nil || r.Expect.Every != time.Hour || !r.Expect.Since.Equal(t0) {
			t.Fatalf("expectation %+v, want every 1h since %v", r.Expect, t0)
		}
		Release(r, lease(r), leasestore.Outcome{Result: leasestore.ResultCompleted}, at(time.Minute))
		if _, _, err := Acquire(r, request("w2"), at(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if r.Expect == nil || r.Expect.Every != time.Hour {
			t.Errorf("expectation %+v after a grant without one, want it kept", r.Expect)
		}
	})
	t.Run("a refused grant records nothing", func(t *testing.T) {
		r := running("w1", 10)
		req := request("w2")
		req.Expect = hourly(0)
		if _, _, err := Acquire(r, req, at(time.Second)); err == nil {
			t.Fatal("granted a held job")
		}
		if r.Expect != nil {
			t.Errorf("expectation %+v after a refusal, want none", r.Expect)
		}
	})
}
