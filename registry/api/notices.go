package api

import (
	"fmt"
	"slices"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Notices travel as leasestore.Notice's JSON (docs/registry-openapi.yaml,
// Notice), times in RFC 3339.

// PutNoticesRequest is the body of POST PathPutNotices.
type PutNoticesRequest struct {
	Notices []leasestore.Notice `json:"notices"`
}

// MaxPutNotices bounds the notices one POST PathPutNotices carries.
const MaxPutNotices = 100

// Validate checks the notices to put.
func (r *PutNoticesRequest) Validate() error {
	if len(r.Notices) > MaxPutNotices {
		return &FieldError{Field: "notices", Reason: fmt.Sprintf("at most %d per request, not %d", MaxPutNotices, len(r.Notices))}
	}
	for i := range r.Notices {
		if err := r.Notices[i].Validate(); err != nil {
			return &FieldError{Field: "notices", Reason: err.Error()}
		}
	}
	return nil
}

// ClaimNoticesRequest is the body of POST PathClaimNotices.
type ClaimNoticesRequest struct {
	Owner  string `json:"owner"`
	Limit  int    `json:"limit"`
	HoldMS int64  `json:"hold_ms"`
}

// Validate checks a claim and returns its hold.
func (r *ClaimNoticesRequest) Validate() (time.Duration, error) {
	switch {
	case r.Owner == "" || len(r.Owner) > 256:
		return 0, &FieldError{Field: "owner", Reason: "1 to 256 bytes"}
	case r.Limit < 1 || r.Limit > leasestore.MaxNoticeClaim:
		return 0, &FieldError{Field: "limit", Reason: fmt.Sprintf("1 to %d", leasestore.MaxNoticeClaim)}
	case r.HoldMS < 1 || r.HoldMS > MS(time.Hour):
		return 0, &FieldError{Field: "hold_ms", Reason: "1 to 3600000"}
	}
	return Duration(r.HoldMS), nil
}

// NoticeList is the answer of POST PathClaimNotices and GET PathNotices,
// oldest first.
type NoticeList struct {
	Notices []leasestore.Notice `json:"notices"`
}

// SettleNoticeRequest is the body of POST PathSettleNotice.
type SettleNoticeRequest struct {
	Key       string `json:"key"`
	Owner     string `json:"owner"`
	Sent      bool   `json:"sent"`
	RetryInMS int64  `json:"retry_in_ms,omitempty"`
	Error     string `json:"error,omitempty"`
	// SentTo are the sinks that took the notice in this attempt.
	SentTo []string `json:"sent_to,omitempty"`
}

// Validate checks a settlement and returns it.
func (r *SettleNoticeRequest) Validate() (leasestore.Settlement, error) {
	switch {
	case r.Key == "":
		return leasestore.Settlement{}, &FieldError{Field: "key", Reason: "missing"}
	case r.Owner == "":
		return leasestore.Settlement{}, &FieldError{Field: "owner", Reason: "missing"}
	case r.RetryInMS < 0 || r.RetryInMS > MS(leasestore.NoticeRetention):
		return leasestore.Settlement{}, &FieldError{Field: "retry_in_ms", Reason: fmt.Sprintf("0 to %d", MS(leasestore.NoticeRetention))}
	case len(r.SentTo) > leasestore.MaxNoticeSinks || slices.ContainsFunc(r.SentTo, func(id string) bool { return id == "" || len(id) > leasestore.MaxSinkID }):
		return leasestore.Settlement{}, &FieldError{Field: "sent_to",
			Reason: fmt.Sprintf("at most %d sink IDs of 1 to %d bytes", leasestore.MaxNoticeSinks, leasestore.MaxSinkID)}
	}
	return leasestore.Settlement{Sent: r.Sent, RetryIn: Duration(r.RetryInMS), Error: r.Error, SentTo: r.SentTo}, nil
}
