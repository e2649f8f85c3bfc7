package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// The model-based test's expectations: set with grants and by operators,
// cleared, and the overdue jobs compared. A job's due time is the store's
// clock at its last success or its setting plus the period, which the
// model's clock cannot tell, so the periods are a millisecond (overdue a
// millisecond later, by the store's clock) or an hour (never overdue while
// the sequence runs): the model says which, and the store's own status
// says when (compareOverdue).

// modelExpectations are the expectations the sequence asks for.
var modelExpectations = []leasestore.Expectation{
	{Every: time.Millisecond}, {Every: time.Hour}, {Every: time.Hour, Grace: time.Millisecond},
}

// someExpectation is one of modelExpectations.
func (ls *lockstep) someExpectation() *leasestore.Expectation {
	x := modelExpectations[ls.rnd.IntN(len(modelExpectations))]
	return &x
}

// describeExpect is an expectation in the terms the rules fix: its period
// and grace (its since is a time of the store's clock: compareSince).
func describeExpect(x *leasestore.Expectation) string {
	if x == nil {
		return "expect: none"
	}
	return fmt.Sprintf("expect: every %s, grace %s", x.Every, x.Grace)
}

// expect is an operator setting the job's expectation, or, a time in four,
// clearing it.
func (ls *lockstep) expect(t *testing.T, job string) {
	note := leasestore.Note{By: "carol", Reason: fmt.Sprintf("step %d", ls.step)}
	var x *leasestore.Expectation
	if ls.rnd.IntN(4) > 0 {
		x = ls.someExpectation()
	}
	ls.logf("%s: %s sets %s", job, note.By, describeExpect(x))
	if err := ls.operator.Expect(Ctx(t), job, x, note); err != nil {
		ls.fail(t, "expect", err, "no error")
	}
	m := ls.model[job]
	m.apply(rules.Expect(&m.rec, x, note, ls.now))
}

// expectSince is a job's expectation's since, as the store and the model
// last showed it.
type expectSince struct{ store, model time.Time }

// compareSince fails the test when the store moved the job's expectation's
// since where the rules did not, or the other way round: the times differ
// (each is its own clock's), the moments they move must not.
func (ls *lockstep) compareSince(t *testing.T, job string, store, model *leasestore.JobStatus) {
	t.Helper()
	var now expectSince
	if store.Expect != nil {
		now.store = store.Expect.Since
	}
	if model.Expect != nil {
		now.model = model.Expect.Since
	}
	was := ls.sinces[job]
	if storeMoved, modelMoved := !now.store.Equal(was.store), !now.model.Equal(was.model); storeMoved != modelMoved {
		ls.fail(t, fmt.Sprintf("whether the expectation of %s was set anew", job), storeMoved, modelMoved)
	}
	ls.sinces[job] = now
}

// compareOverdue fails the test when Overdue does not list what the jobs'
// statuses, read just before by the same store clock, and the rules say: a
// job due before its status was read is listed, with its status's
// expectation and last success; a listed job is past its due time; a job
// the rules see due an hour or more from now is not listed.
func (ls *lockstep) compareOverdue(t *testing.T) {
	t.Helper()
	statuses := map[string]*leasestore.JobStatus{}
	for _, job := range modelJobs {
		statuses[job] = Status(t, ls.operator, job)
	}
	list, err := ls.operator.Overdue(Ctx(t))
	if err != nil {
		ls.fail(t, "overdue", err, "no error")
	}
	listed := map[string]leasestore.Overdue{}
	for _, o := range list {
		listed[o.Job] = o
	}
	for _, job := range modelJobs {
		st, o := statuses[job], listed[job]
		_, isListed := listed[job]
		modelDue := rules.Due(&ls.model[job].rec)
		switch {
		case st.Expect == nil && isListed:
			ls.fail(t, "overdue lists "+job, "listed", "no expectation, not listed")
		case st.Expect == nil:
		case !isListed && st.Now.After(st.Expect.Due(st.LastSuccess)):
			ls.fail(t, "overdue lists "+job, "not listed", fmt.Sprintf("listed: due %v, status read at %v", st.Expect.Due(st.LastSuccess), st.Now))
		case isListed && (!sameExpectation(o.Expect, *st.Expect) || !o.LastSuccess.Equal(st.LastSuccess) ||
			!o.Due.Equal(st.Expect.Due(st.LastSuccess)) || !o.Now.After(o.Due)):
			ls.fail(t, "the overdue entry of "+job, fmt.Sprintf("%+v", o),
				fmt.Sprintf("expectation %+v, last success %v, as its status shows", st.Expect, st.LastSuccess))
		case isListed && modelDue.Sub(ls.now) >= 30*time.Minute:
			ls.fail(t, "overdue lists "+job, "listed", fmt.Sprintf("due in %s", modelDue.Sub(ls.now)))
		}
		if isListed {
			ls.seen["overdue: listed"]++
		}
	}
}
