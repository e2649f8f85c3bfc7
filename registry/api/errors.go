package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Error codes: stable, one per kind of refusal or failure. A client
// matches the code, never the message. Status gives each one's HTTP status.
const (
	CodeInvalidRequest       = "invalid_request"           // 400: a field is missing or wrong; field names it
	CodeNamespaceMismatch    = "namespace_mismatch"        // 400: the registry serves another namespace
	CodeUnauthenticated      = "unauthenticated"           // 401: no bearer token, or one the registry does not know
	CodeForbidden            = "forbidden"                 // 403: the token's role may not do this; role and required_role name them
	CodeNotFound             = "not_found"                 // 404: no such route
	CodeSubscriptionNotFound = "subscription_not_found"    // 404: expired, dropped by a restart, or another token's
	CodeTokenWatchNotFound   = "token_watch_not_found"     // 404: a token watch expired, dropped by a restart, or another token's
	CodeMethodNotAllowed     = "method_not_allowed"        // 405
	CodeHeld                 = "held"                      // 409: another worker holds the job; holder says who
	CodeTooSoon              = "too_soon"                  // 409: the job succeeded less than min_interval_ms ago
	CodeRegionMismatch       = "region_mismatch"           // 409: the job belongs to another region
	CodeLeaseLost            = "lease_lost"                // 409: the token is no longer the job's live lease (a stale token)
	CodeNotQuarantined       = "not_quarantined"           // 409: unquarantine of a job that is not quarantined
	CodeNotRunning           = "not_running"               // 409: stop of a job that has no live lease
	CodeNoticeNotHeld        = "notice_not_held"           // 409: settle-notice: the owner's claim was taken over, or the notice was sent
	CodeStaleToken           = "stale_token"               // 409: check-token: not the current token, or not live
	CodeSlotsMismatch        = "slots_mismatch"            // 409: the request asks for another number of slots than the job's runs in flight
	CodeDeadlinePassed       = "deadline_passed"           // 410: the job's ttl_deadline passed: no more retries
	CodeRequestExpired       = "request_expired"           // 408: the request arrived after its sender's deadline (HeaderDeadline); it was not run
	CodeTokenWatchBehind     = "token_watch_behind"        // 410: a token watch's client fell behind and states were dropped; the watch is gone
	CodeRequestTooLarge      = "request_too_large"         // 413
	CodeIdempotencyKeyReused = "idempotency_key_reused"    // 422: the key came before with another request
	CodeQuarantined          = "quarantined"               // 423: the job is quarantined
	CodeRateLimited          = "rate_limited"              // 429: too many requests from this address
	CodeInternal             = "internal"                  // 500
	CodeNoTokenFeed          = "token_feed_unsupported"    // 501: the store behind the registry has no token feed
	CodeNoLateOutcomes       = "late_outcomes_unsupported" // 501: the store behind the registry does not record late outcomes
	CodeStoreUnavailable     = "store_unavailable"         // 503: the store behind the registry failed; the operation may or may not have happened
	CodeShuttingDown         = "shutting_down"             // 503: the registry is stopping; try again
	CodeTooManySubscriptions = "too_many_subscriptions"    // 503: the registry holds as many subscriptions as it may
	CodeTooManyTokenWatches  = "too_many_token_watches"    // 503: the registry holds as many token watches as it may
)

// Codes lists every error code, for documentation checks.
func Codes() []string {
	return []string{
		CodeInvalidRequest, CodeNamespaceMismatch, CodeUnauthenticated, CodeForbidden, CodeNotFound,
		CodeSubscriptionNotFound, CodeMethodNotAllowed, CodeHeld, CodeTooSoon, CodeRegionMismatch,
		CodeLeaseLost, CodeNotQuarantined, CodeStaleToken, CodeDeadlinePassed, CodeRequestTooLarge,
		CodeIdempotencyKeyReused, CodeQuarantined, CodeRateLimited, CodeInternal, CodeStoreUnavailable,
		CodeShuttingDown, CodeTooManySubscriptions, CodeTokenWatchNotFound, CodeTokenWatchBehind, CodeNoTokenFeed,
		CodeTooManyTokenWatches, CodeNoLateOutcomes, CodeNotRunning, CodeRequestExpired, CodeSlotsMismatch,
		CodeNoticeNotHeld,
	}
}

// Status is the HTTP status of an error code; 500 for a code it does not
// know.
func Status(code string) int {
	switch code {
	case CodeInvalidRequest, CodeNamespaceMismatch:
		return http.StatusBadRequest
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case CodeNotFound, CodeSubscriptionNotFound, CodeTokenWatchNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeHeld, CodeTooSoon, CodeRegionMismatch, CodeLeaseLost, CodeNotQuarantined, CodeNotRunning, CodeStaleToken, CodeSlotsMismatch,
		CodeNoticeNotHeld:
		return http.StatusConflict
	case CodeDeadlinePassed, CodeTokenWatchBehind:
		return http.StatusGone
	case CodeRequestExpired:
		return http.StatusRequestTimeout
	case CodeRequestTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeIdempotencyKeyReused:
		return http.StatusUnprocessableEntity
	case CodeQuarantined:
		return http.StatusLocked
	case CodeRateLimited:
		return http.StatusTooManyRequests
	case CodeNoTokenFeed, CodeNoLateOutcomes:
		return http.StatusNotImplemented
	case CodeStoreUnavailable, CodeShuttingDown, CodeTooManySubscriptions, CodeTooManyTokenWatches:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// ErrorBody is the one shape of every error answer: {"error": {...}}.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// Error is a refusal or a failure: a stable code, a message for people,
// and the data of the leasestore error it stands for, so that a client
// rebuilds that error whole.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	JobID   string `json:"job_id,omitempty"`

	Field        string `json:"field,omitempty"`         // invalid_request
	Namespace    string `json:"namespace,omitempty"`     // namespace_mismatch: the one the registry serves
	Role         string `json:"role,omitempty"`          // forbidden: the token's role
	RequiredRole string `json:"required_role,omitempty"` // forbidden: the least role that may

	Holder *HeldBy `json:"holder,omitempty"` // held; its worker_id is empty when a slot is free but promised to earlier waiters

	Slots          int         `json:"slots,omitempty"`           // held, slots_mismatch: the job's
	RequestedSlots int         `json:"requested_slots,omitempty"` // slots_mismatch: the request's
	Position       int         `json:"position,omitempty"`        // held: the request's place in the job's queue, from 1, when it waits
	Waiting        int         `json:"waiting,omitempty"`         // held: how many wait
	Quarantine     *Quarantine `json:"quarantine,omitempty"`      // quarantined

	LastSuccess   *time.Time `json:"last_success,omitempty"`    // too_soon
	MinIntervalMS int64      `json:"min_interval_ms,omitempty"` // too_soon
	AgeMS         int64      `json:"age_ms,omitempty"`          // too_soon

	Region          string `json:"region,omitempty"`           // region_mismatch: the job's
	RequestedRegion string `json:"requested_region,omitempty"` // region_mismatch: the request's

	TTLDeadline *time.Time `json:"ttl_deadline,omitempty"` // deadline_passed
	Now         *time.Time `json:"now,omitempty"`          // deadline_passed: the store's clock

	FencingToken int64  `json:"fencing_token,omitempty"` // stale_token: the token checked
	CurrentToken *int64 `json:"current_token,omitempty"` // stale_token: 0 if the store has none
	Live         *bool  `json:"live,omitempty"`          // stale_token: whether the current token's lease is live
}

// HeldBy is who holds a job, in a held error.
type HeldBy struct {
	WorkerID     string    `json:"worker_id"`
	Host         string    `json:"host"`
	PID          int       `json:"pid"`
	FencingToken int64     `json:"fencing_token"`
	Since        time.Time `json:"since"`
	ExpiresInMS  int64     `json:"expires_in_ms"`
}

// Error is the code and the message.
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Status is the error's HTTP status.
func (e *Error) Status() int { return Status(e.Code) }

// Errorf returns an error of code with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// FieldError is a request field that is missing or wrong.
type FieldError struct {
	Field  string
	Reason string
}

// Error names the field and what is wrong with it.
func (e *FieldError) Error() string { return "invalid " + e.Field + ": " + e.Reason }

// FromError is the wire form of err, as a store, a validation or the
// registry returned it: each leasestore typed error keeps its data; an
// unavailable store is store_unavailable; anything else is internal.
func FromError(err error) *Error {
	var (
		we      *Error
		fe      *FieldError
		held    *leasestore.HeldError
		quar    *leasestore.QuarantinedError
		soon    *leasestore.TooSoonError
		region  *leasestore.RegionError
		dead    *leasestore.DeadlineError
		stale   *leasestore.StaleTokenError
		slots   *leasestore.SlotsError
		badJob  *leasestore.InvalidJobIDError
		message = err.Error()
	)
	switch {
	case errors.As(err, &we):
		return we
	case errors.As(err, &fe):
		return &Error{Code: CodeInvalidRequest, Message: message, Field: fe.Field}
	case errors.As(err, &badJob):
		return &Error{Code: CodeInvalidRequest, Message: message, Field: "job_id"}
	case errors.As(err, &held):
		return &Error{Code: CodeHeld, Message: message, JobID: held.Job, Holder: &HeldBy{
			WorkerID: held.Holder, Host: held.Host, PID: held.PID, FencingToken: held.Token,
			Since: held.Since.UTC(), ExpiresInMS: MS(held.ExpiresIn),
		}, Slots: held.Slots, Position: held.Position, Waiting: held.Waiting}
	case errors.As(err, &slots):
		return &Error{Code: CodeSlotsMismatch, Message: message, JobID: slots.Job, Slots: slots.Slots, RequestedSlots: slots.Requested}
	case errors.As(err, &quar):
		q := FromQuarantine(quar.Quarantine)
		return &Error{Code: CodeQuarantined, Message: message, JobID: quar.Job, Quarantine: &q}
	case errors.As(err, &soon):
		last := soon.LastSuccess.UTC()
		return &Error{Code: CodeTooSoon, Message: message, JobID: soon.Job, LastSuccess: &last,
			MinIntervalMS: MS(soon.MinInterval), AgeMS: MS(soon.Age)}
	case errors.As(err, &region):
		return &Error{Code: CodeRegionMismatch, Message: message, JobID: region.Job, Region: region.Region,
			RequestedRegion: region.Requested}
	case errors.As(err, &dead):
		deadline, now := dead.Deadline.UTC(), dead.Now.UTC()
		return &Error{Code: CodeDeadlinePassed, Message: message, JobID: dead.Job, TTLDeadline: &deadline, Now: &now}
	case errors.As(err, &stale):
		current, live := stale.Current, stale.Live
		return &Error{Code: CodeStaleToken, Message: message, JobID: stale.Job, FencingToken: stale.Token,
			CurrentToken: &current, Live: &live}
	case errors.Is(err, leasestore.ErrLeaseLost):
		return &Error{Code: CodeLeaseLost, Message: message}
	case errors.Is(err, leasestore.ErrNotQuarantined):
		return &Error{Code: CodeNotQuarantined, Message: message}
	case errors.Is(err, leasestore.ErrNotRunning):
		return &Error{Code: CodeNotRunning, Message: message}
	case errors.Is(err, leasestore.ErrNoticeNotHeld):
		return &Error{Code: CodeNoticeNotHeld, Message: message}
	case errors.Is(err, leasestore.ErrUnavailable):
		return &Error{Code: CodeStoreUnavailable, Message: message}
	default:
		return &Error{Code: CodeInternal, Message: message}
	}
}

// StoreError rebuilds the leasestore error e stands for: a typed refusal
// with its data, or ErrLeaseLost, ErrNotQuarantined or ErrNotRunning wrapped with the job. It returns nil for a code that is no answer of the
// store (authentication, rate limits, a store or registry that failed):
// the caller reports those as the store being unavailable.
func (e *Error) StoreError() error {
	switch e.Code {
	case CodeHeld:
		h := e.Holder
		if h == nil {
			h = &HeldBy{}
		}
		return &leasestore.HeldError{Job: e.JobID, Holder: h.WorkerID, Host: h.Host, PID: h.PID, Token: h.FencingToken,
			Since: h.Since, ExpiresIn: Duration(h.ExpiresInMS), Slots: e.Slots, Position: e.Position, Waiting: e.Waiting}
	case CodeSlotsMismatch:
		return &leasestore.SlotsError{Job: e.JobID, Slots: e.Slots, Requested: e.RequestedSlots}
	case CodeQuarantined:
		var q leasestore.Quarantine
		if e.Quarantine != nil {
			q = e.Quarantine.ToStore()
		}
		return &leasestore.QuarantinedError{Quarantine: q}
	case CodeTooSoon:
		return &leasestore.TooSoonError{Job: e.JobID, LastSuccess: timeOf(e.LastSuccess),
			MinInterval: Duration(e.MinIntervalMS), Age: Duration(e.AgeMS)}
	case CodeRegionMismatch:
		return &leasestore.RegionError{Job: e.JobID, Region: e.Region, Requested: e.RequestedRegion}
	case CodeDeadlinePassed:
		return &leasestore.DeadlineError{Job: e.JobID, Deadline: timeOf(e.TTLDeadline), Now: timeOf(e.Now)}
	case CodeStaleToken:
		stale := &leasestore.StaleTokenError{Job: e.JobID, Token: e.FencingToken}
		if e.CurrentToken != nil {
			stale.Current = *e.CurrentToken
		}
		if e.Live != nil {
			stale.Live = *e.Live
		}
		return stale
	case CodeLeaseLost:
		return fmt.Errorf("job %q: %w", e.JobID, leasestore.ErrLeaseLost)
	case CodeNotQuarantined:
		return fmt.Errorf("job %q: %w", e.JobID, leasestore.ErrNotQuarantined)
	case CodeNotRunning:
		return fmt.Errorf("job %q: %w", e.JobID, leasestore.ErrNotRunning)
	case CodeNoticeNotHeld:
		return fmt.Errorf("%s: %w", e.Message, leasestore.ErrNoticeNotHeld)
	default:
		return nil
	}
}

// timeOf is *t, or the zero time for nil.
func timeOf(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
