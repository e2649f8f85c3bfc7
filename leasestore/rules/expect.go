package rules

import (
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Expect sets the job's expectation at now by note's operator, or clears it
// when x is nil, and records it in the history. Setting the period and
// grace the job already has keeps its Since; clearing a job without an
// expectation changes nothing.
func Expect(r *Record, x *leasestore.Expectation, note leasestore.Note, now time.Time) Step {
	var s Step
	if x == nil && r.Expect == nil {
		return s
	}
	if x == nil {
		r.Expect = nil
	} else {
		r.setExpect(x, now)
	}
	s.record(now, leasestore.Event{Kind: leasestore.EventExpect, Worker: note.By, Detail: x.Detail(note)})
	return s
}

// setExpect records x as the job's expectation at now: last writer wins,
// and Since moves only when Every or Grace change. A nil x changes nothing
// (a run that asks for no expectation leaves the job's as it is).
func (r *Record) setExpect(x *leasestore.Expectation, now time.Time) {
	if x == nil || r.Expect != nil && r.Expect.Same(*x) {
		return
	}
	r.Expect = &leasestore.Expectation{Every: x.Every, Grace: x.Grace, Since: now}
}

// Due is when the job becomes overdue (leasestore.Expectation.Due); zero
// when it has no expectation. The stores that keep an index by due time
// key it by this.
func Due(r *Record) time.Time {
	if r.Expect == nil {
		return time.Time{}
	}
	return r.Expect.Due(r.LastSuccess)
}

// Overdue is what Operator.Overdue reports of the job at now: nil unless
// the store's clock is past its due time.
func Overdue(r *Record, now time.Time) *leasestore.Overdue {
	due := Due(r)
	if due.IsZero() || !now.After(due) {
		return nil
	}
	return &leasestore.Overdue{Job: r.Job, Expect: *r.Expect, LastSuccess: r.LastSuccess, Due: due, Now: now}
}
