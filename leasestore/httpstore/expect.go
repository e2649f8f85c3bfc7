package httpstore

import (
	"context"
	"net/http"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
)

// Expect sets or clears job's expectation; see leasestore.Store.
func (s *Store) Expect(ctx context.Context, job string, x *leasestore.Expectation, note leasestore.Note) error {
	return s.do(ctx, call{op: "expect", method: http.MethodPost, path: api.PathExpect,
		body: api.ExpectRequest{JobID: job, By: note.By, Reason: note.Reason, Expect: api.FromExpectation(x)},
		key:  randomKey()}, nil)
}

// Overdue lists the jobs past their expectation; see leasestore.Store.
func (s *Store) Overdue(ctx context.Context) ([]leasestore.Overdue, error) {
	var r api.OverdueJobs
	if err := s.do(ctx, call{op: "list overdue", method: http.MethodGet, path: api.PathOverdue}, &r); err != nil {
		return nil, err
	}
	return r.ToStore(), nil
}
