package fence

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/leasectl/leasectl/leasestore"
)

// The request headers Middleware reads: the job ID, the token and the slot,
// as `leasectl run` gives them to the child in LEASECTL_JOB_ID,
// LEASECTL_FENCING_TOKEN and LEASECTL_SLOT. The slot is optional: a request
// without it is admitted in slot 0 (Admit), one with it in its slot
// (AdmitSlot), which a job of several slots needs.
const (
	HeaderJob   = "Leasectl-Job-Id"
	HeaderToken = "Leasectl-Fencing-Token"
	HeaderSlot  = "Leasectl-Slot"
)

// Refusal is the JSON body of every response Middleware writes instead of
// calling the handler.
type Refusal struct {
	// Error is the kind of refusal: "stale_token" (409), "bad_request"
	// (400), "unavailable" (503).
	Error string `json:"error"`
	// Message says why, in one sentence.
	Message string `json:"message"`
	Job     string `json:"job,omitempty"`
	Token   int64  `json:"token,omitempty"`
	// Slot is the slot the token was checked in: the Leasectl-Slot
	// header's, 0 (left out) without one.
	Slot int `json:"slot,omitempty"`
	// NewestToken is the highest token known for the job (stale_token
	// only); Live is whether its run was live as last learned.
	NewestToken int64 `json:"newest_token,omitempty"`
	Live        bool  `json:"live,omitempty"`
}

// Middleware returns a handler that admits each request (Admit) and
// calls next while the admission holds, so that no request with an older
// token runs alongside or after one with a newer token: the first request
// with a newer token waits until the older ones in progress have returned
// (bounded by its context). Requests with the same token run side by side.
// It answers instead
// of calling next, with a Refusal as JSON:
//
//   - 409 Conflict, "stale_token": the token may not be used. The writer
//     should stop: it has been overtaken or its run has ended.
//   - 400 Bad Request, "bad_request": a header is missing or malformed.
//   - 503 Service Unavailable, "unavailable", with Retry-After: the store
//     could not be asked. Nothing was written; the writer may retry.
//
// The request's context bounds the check. c.Middleware has the shape of
// the usual middleware, func(http.Handler) http.Handler.
func (c *Checker) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		job := r.Header.Get(HeaderJob)
		token, err := strconv.ParseInt(r.Header.Get(HeaderToken), 10, 64)
		if job == "" || err != nil {
			writeRefusal(w, http.StatusBadRequest, Refusal{Error: "bad_request", Job: job,
				Message: "the " + HeaderJob + " header must name the job and " + HeaderToken + " carry its fencing token, a decimal integer"})
			return
		}
		var done func()
		slot := 0
		if h := r.Header.Get(HeaderSlot); h == "" {
			done, err = c.Admit(r.Context(), job, token)
		} else if slot, err = strconv.Atoi(h); err != nil {
			writeRefusal(w, http.StatusBadRequest, Refusal{Error: "bad_request", Job: job, Token: token,
				Message: "the " + HeaderSlot + " header, when given, must carry the run's slot, a decimal integer from 0"})
			return
		} else {
			done, err = c.AdmitSlot(r.Context(), job, slot, token)
		}
		var stale *StaleError
		switch {
		case err == nil:
			defer done()
			next.ServeHTTP(w, r)
		case errors.As(err, &stale):
			writeRefusal(w, http.StatusConflict, Refusal{Error: "stale_token", Message: err.Error(), Job: job, Token: token, Slot: stale.Slot,
				NewestToken: stale.Newest, Live: stale.Live})
		case errors.Is(err, ErrInvalid):
			writeRefusal(w, http.StatusBadRequest, Refusal{Error: "bad_request", Message: err.Error(), Job: job, Token: token, Slot: slot})
		default:
			msg := "the fencing token could not be checked: the lease store did not answer"
			if !errors.Is(err, leasestore.ErrUnavailable) {
				msg = "the fencing token could not be checked: " + err.Error()
			}
			w.Header().Set("Retry-After", "1")
			writeRefusal(w, http.StatusServiceUnavailable, Refusal{Error: "unavailable", Message: msg, Job: job, Token: token, Slot: slot})
		}
	})
}

// writeRefusal writes r as the JSON body of a response with status.
func writeRefusal(w http.ResponseWriter, status int, r Refusal) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(r)
}
