package registry

import (
	"net/http"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
)

// putNotices records events to notify (a worker's lost lease, a crash its
// next run counted).
func (s *Server) putNotices(x *exchange) (int, any, error) {
	var r api.PutNoticesRequest
	if err := x.decode(&r); err != nil {
		return 0, nil, err
	}
	if err := r.Validate(); err != nil {
		return 0, nil, err
	}
	if err := s.cfg.Store.PutNotices(x.ctx, r.Notices); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.Success{Success: true}, nil
}

// claimNotices claims notices due for delivery for a reaper.
func (s *Server) claimNotices(x *exchange) (int, any, error) {
	var r api.ClaimNoticesRequest
	if err := x.decode(&r); err != nil {
		return 0, nil, err
	}
	hold, err := r.Validate()
	x.worker = r.Owner
	if err != nil {
		return 0, nil, err
	}
	list, err := s.cfg.Store.ClaimNotices(x.ctx, r.Owner, r.Limit, hold)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.NoticeList{Notices: append(make([]leasestore.Notice, 0, len(list)), list...)}, nil
}

// settleNotice ends a reaper's claim on a notice.
func (s *Server) settleNotice(x *exchange) (int, any, error) {
	var r api.SettleNoticeRequest
	if err := x.decode(&r); err != nil {
		return 0, nil, err
	}
	settlement, err := r.Validate()
	x.worker = r.Owner
	if err != nil {
		return 0, nil, err
	}
	if err := s.cfg.Store.SettleNotice(x.ctx, r.Key, r.Owner, settlement); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.Success{Success: true}, nil
}

// notices lists the kept notices.
func (s *Server) notices(x *exchange) (int, any, error) {
	list, err := s.cfg.Store.ListNotices(x.ctx)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.NoticeList{Notices: append(make([]leasestore.Notice, 0, len(list)), list...)}, nil
}
