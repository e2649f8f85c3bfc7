package api

import (
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Expectation is a job's expectation on the wire: it must complete
// successfully every every_ms, grace_ms allowed on top.
type Expectation struct {
	EveryMS int64 `json:"every_ms"`
	GraceMS int64 `json:"grace_ms"`
	// Since is when the store set it; absent in a request.
	Since *time.Time `json:"since,omitempty"`
}

// ExpectRequest is the body of POST PathExpect: an operator sets the job's
// expectation, or clears it with expect null or absent.
type ExpectRequest struct {
	JobID  string       `json:"job_id"`
	By     string       `json:"by"`
	Reason string       `json:"reason"`
	Expect *Expectation `json:"expect"`
}

// Overdue is a job past its expectation.
type Overdue struct {
	JobID       string      `json:"job_id"`
	Expect      Expectation `json:"expect"`
	LastSuccess *time.Time  `json:"last_success"` // null: never
	DueAt       time.Time   `json:"due_at"`
	Now         time.Time   `json:"now"` // the store's clock
}

// OverdueJobs is the answer to GET PathOverdue, ordered by job.
type OverdueJobs struct {
	Jobs []Overdue `json:"jobs"`
}

// FromExpectation is x on the wire; nil for nil.
func FromExpectation(x *leasestore.Expectation) *Expectation {
	if x == nil {
		return nil
	}
	e := &Expectation{EveryMS: MS(x.Every), GraceMS: MS(x.Grace)}
	if !x.Since.IsZero() {
		since := x.Since.UTC()
		e.Since = &since
	}
	return e
}

// ToStore validates e and returns the expectation it describes; nil for
// nil. A *FieldError names the rule broken.
func (e *Expectation) ToStore() (*leasestore.Expectation, error) {
	if e == nil {
		return nil, nil
	}
	x := e.store()
	if err := x.Validate(); err != nil {
		return nil, &FieldError{Field: "expect", Reason: err.Error()}
	}
	return &x, nil
}

// store is the expectation e describes, unchecked (an answer's).
func (e *Expectation) store() leasestore.Expectation {
	return leasestore.Expectation{Every: Duration(e.EveryMS), Grace: Duration(e.GraceMS), Since: timeOf(e.Since)}
}

// Validate checks an expect request and returns its job, expectation and
// note.
func (r *ExpectRequest) Validate() (string, *leasestore.Expectation, leasestore.Note, error) {
	n := NoteRequest{JobID: r.JobID, By: r.By, Reason: r.Reason}
	job, note, err := n.Validate()
	if err != nil {
		return job, nil, note, err
	}
	x, err := r.Expect.ToStore()
	return job, x, note, err
}

// FromOverdue is list on the wire.
func FromOverdue(list []leasestore.Overdue) OverdueJobs {
	out := OverdueJobs{Jobs: make([]Overdue, 0, len(list))}
	for _, o := range list {
		w := Overdue{JobID: o.Job, Expect: *FromExpectation(&o.Expect), DueAt: o.Due.UTC(), Now: o.Now.UTC()}
		if !o.LastSuccess.IsZero() {
			last := o.LastSuccess.UTC()
			w.LastSuccess = &last
		}
		out.Jobs = append(out.Jobs, w)
	}
	return out
}

// ToStore is the overdue jobs o lists.
func (o *OverdueJobs) ToStore() []leasestore.Overdue {
	var list []leasestore.Overdue
	for _, w := range o.Jobs {
		list = append(list, leasestore.Overdue{Job: w.JobID, Expect: w.Expect.store(), LastSuccess: timeOf(w.LastSuccess), Due: w.DueAt, Now: w.Now})
	}
	return list
}
