package pgstore

import (
	"context"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// expectArgs are an expectation's every and grace as the functions take
// them: microseconds, NULL (nil) for none.
func expectArgs(x *leasestore.Expectation) (every, grace []byte) {
	if x == nil {
		return nil, nil
	}
	return micros(x.Every), micros(x.Grace)
}

// expectation is the expectation of a job's row: every and grace in µs,
// since in µs since the Unix epoch; nil when every is NULL.
func expectation(every *int64, grace, since int64) *leasestore.Expectation {
	if every == nil {
		return nil
	}
	return &leasestore.Expectation{Every: time.Duration(*every) * time.Microsecond,
		Grace: time.Duration(grace) * time.Microsecond, Since: usTime(since)}
}

// Expect sets or clears job's expectation; see leasestore.Store.
func (s *Store) Expect(ctx context.Context, job string, x *leasestore.Expectation, note leasestore.Note) error {
	if err := text(note.By, note.Reason); err != nil {
		return err
	}
	every, grace := expectArgs(x)
	var changed bool
	return s.call(ctx, "expect", s.sqlExpect, &changed, version(), []byte(job), every, grace, []byte(note.By),
		[]byte(x.Detail(note)))
}

// Overdue lists the jobs past their expectation, ordered by job; see
// leasestore.Store. One call, which reads the index by due time up to now.
func (s *Store) Overdue(ctx context.Context) ([]leasestore.Overdue, error) {
	var r struct {
		Now  int64 `json:"now"`
		Jobs []struct {
			Job         string `json:"job"`
			Every       int64  `json:"every_us"`
			Grace       int64  `json:"grace_us"`
			Since       int64  `json:"since"`
			LastSuccess int64  `json:"last_success"` // null: never
		} `json:"jobs"`
	}
	if err := s.call(ctx, "list overdue", s.sqlOverdue, &r, version()); err != nil {
		return nil, err
	}
	list := make([]leasestore.Overdue, len(r.Jobs))
	for i, j := range r.Jobs {
		x := expectation(&j.Every, j.Grace, j.Since)
		last := usTime(j.LastSuccess)
		list[i] = leasestore.Overdue{Job: j.Job, Expect: *x, LastSuccess: last, Due: x.Due(last), Now: usTime(r.Now)}
	}
	return list, nil
}
