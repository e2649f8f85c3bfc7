package httpstore

import (
	"context"
	"errors"
	"fmt"
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

// Overdue lists the jobs past their expectation; see leasestore.Store. A
// registry older than expectations has no such route: its error then
// matches errors.ErrUnsupported.
func (s *Store) Overdue(ctx context.Context) ([]leasestore.Overdue, error) {
	var r api.OverdueJobs
	err := s.do(ctx, call{op: "list overdue", method: http.MethodGet, path: api.PathOverdue}, &r)
	var ae *api.Error
	if errors.As(err, &ae) && ae.Code == api.CodeNotFound {
		return nil, &leasestore.UnavailableError{Op: "list overdue",
			Err: fmt.Errorf("registry %s is older than job expectations: %w", s.display, errors.ErrUnsupported)}
	}
	if err != nil {
		return nil, err
	}
	return r.ToStore(), nil
}
