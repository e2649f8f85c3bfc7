package httpstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
)

// PutNotices records notices not yet kept; see leasestore.Notices.
func (s *Store) PutNotices(ctx context.Context, notices []leasestore.Notice) error {
	for start := 0; start < len(notices); start += api.MaxPutNotices {
		batch := notices[start:min(start+api.MaxPutNotices, len(notices))]
		if err := s.do(ctx, call{op: "put notices", method: http.MethodPost, path: api.PathPutNotices,
			body: api.PutNoticesRequest{Notices: batch}, key: randomKey()}, nil); err != nil {
			return s.olderThanNotices("put notices", err)
		}
	}
	return nil
}

// ClaimNotices claims due notices for owner; see leasestore.Notices.
func (s *Store) ClaimNotices(ctx context.Context, owner string, limit int, hold time.Duration) ([]leasestore.Notice, error) {
	var r api.NoticeList
	err := s.do(ctx, call{op: "claim notices", method: http.MethodPost, path: api.PathClaimNotices,
		body: api.ClaimNoticesRequest{Owner: owner, Limit: min(limit, leasestore.MaxNoticeClaim), HoldMS: api.MS(hold)}}, &r)
	return r.Notices, s.olderThanNotices("claim notices", err)
}

// SettleNotice ends owner's claim on a notice; see leasestore.Notices.
func (s *Store) SettleNotice(ctx context.Context, key, owner string, st leasestore.Settlement) error {
	return s.olderThanNotices("settle notice", s.do(ctx, call{op: "settle notice", method: http.MethodPost, path: api.PathSettleNotice,
		body: api.SettleNoticeRequest{Key: key, Owner: owner, Sent: st.Sent, RetryInMS: api.MS(st.RetryIn), Error: st.Error,
			SentTo: st.SentTo},
		key: randomKey()}, nil))
}

// ListNotices returns the kept notices; see leasestore.Notices.
func (s *Store) ListNotices(ctx context.Context) ([]leasestore.Notice, error) {
	var r api.NoticeList
	err := s.do(ctx, call{op: "list notices", method: http.MethodGet, path: api.PathNotices}, &r)
	return r.Notices, s.olderThanNotices("list notices", err)
}

// olderThanNotices is err, or, when the registry has no notices' routes
// (older than notices), an error that matches errors.ErrUnsupported.
func (s *Store) olderThanNotices(op string, err error) error {
	var ae *api.Error
	if errors.As(err, &ae) && ae.Code == api.CodeNotFound {
		return &leasestore.UnavailableError{Op: op, Err: fmt.Errorf("registry %s is older than notices: %w", s.display, errors.ErrUnsupported)}
	}
	return err
}
