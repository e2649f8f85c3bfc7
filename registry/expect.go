package registry

import (
	"net/http"

	"github.com/leasectl/leasectl/registry/api"
)

// expect sets or clears a job's expectation by an operator's decision.
func (s *Server) expect(x *exchange) (int, any, error) {
	var r api.ExpectRequest
	if err := x.decode(&r); err != nil {
		return 0, nil, err
	}
	job, expectation, note, err := r.Validate()
	x.job, x.worker = job, note.By
	if err != nil {
		return 0, nil, err
	}
	if err := s.cfg.Store.Expect(x.ctx, job, expectation, note); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.Success{Success: true}, nil
}

// overdue lists the jobs past their expectation.
func (s *Server) overdue(x *exchange) (int, any, error) {
	list, err := s.cfg.Store.Overdue(x.ctx)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.FromOverdue(list), nil
}
