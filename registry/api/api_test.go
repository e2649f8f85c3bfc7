package api_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
	"github.com/leasectl/leasectl/supervise"
)

var (
	t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	t1 = t0.Add(90 * time.Second)
)

// roundTrip sends err over the wire as the registry would and rebuilds it
// as the client does.
func roundTrip(t *testing.T, err error) (*api.Error, error) {
	t.Helper()
	e := api.FromError(err)
	b, merr := json.Marshal(api.ErrorBody{Error: e})
	if merr != nil {
		t.Fatal(merr)
	}
	var back api.ErrorBody
	if uerr := json.Unmarshal(b, &back); uerr != nil {
		t.Fatal(uerr)
	}
	return back.Error, back.Error.StoreError()
}

// Every typed refusal of the store crosses the wire whole, with its own
// code and HTTP status, so that a client's errors.As and exit codes work
// as they do on the store itself.
func TestTypedErrorsCrossTheWireWhole(t *testing.T) {
	tests := []struct {
		err    error
		code   string
		status int
	}{
		{&leasestore.HeldError{Job: "j", Holder: "w7", Host: "h", PID: 42, Token: 43, Since: t0, ExpiresIn: 1500 * time.Millisecond}, api.CodeHeld, http.StatusConflict},
		{&leasestore.QuarantinedError{Quarantine: leasestore.Quarantine{Job: "j", Crashes: 3, Since: t0, Reason: "3 consecutive crashes", By: "leasectl", LastHolder: "w", LastHost: "h"}}, api.CodeQuarantined, http.StatusLocked},
		{&leasestore.TooSoonError{Job: "j", LastSuccess: t0, MinInterval: time.Hour, Age: 2 * time.Minute}, api.CodeTooSoon, http.StatusConflict},
		{&leasestore.RegionError{Job: "j", Region: "us-east-1", Requested: "eu-west-1"}, api.CodeRegionMismatch, http.StatusConflict},
		{&leasestore.DeadlineError{Job: "j", Deadline: t0, Now: t1}, api.CodeDeadlinePassed, http.StatusGone},
		{&leasestore.StaleTokenError{Job: "j", Token: 42, Current: 43, Live: true}, api.CodeStaleToken, http.StatusConflict},
		{&leasestore.StaleTokenError{Job: "j", Token: 42}, api.CodeStaleToken, http.StatusConflict},
	}
	for _, tc := range tests {
		t.Run(tc.code, func(t *testing.T) {
			e, back := roundTrip(t, fmt.Errorf("wrapped: %w", tc.err))
			if e.Code != tc.code || e.Status() != tc.status {
				t.Errorf("code %s status %d, want %s %d", e.Code, e.Status(), tc.code, tc.status)
			}
			if !reflect.DeepEqual(back, tc.err) {
				t.Errorf("rebuilt %#v, want %#v", back, tc.err)
			}
			if e.Message != fmt.Errorf("wrapped: %w", tc.err).Error() {
				t.Errorf("message %q does not carry the store's", e.Message)
			}
		})
	}
}

func TestSentinelErrorsCrossTheWire(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code string
	}{
		{leasestore.ErrLeaseLost, api.CodeLeaseLost},
		{leasestore.ErrNotQuarantined, api.CodeNotQuarantined},
	} {
		e, back := roundTrip(t, fmt.Errorf("renew job %q: %w", "j", tc.err))
		e.JobID = "j"
		if e.Code != tc.code || !errors.Is(back, tc.err) {
			t.Errorf("%v: code %s, rebuilt %v; want %s matching the sentinel", tc.err, e.Code, back, tc.code)
		}
	}
	// Failures of the store or the registry are no answer of the store:
	// the client reports them as the store being unavailable.
	for _, err := range []error{&leasestore.UnavailableError{Op: "acquire", Err: errors.New("down")}, errors.New("something else")} {
		e, back := roundTrip(t, err)
		if back != nil || e.Status() < 500 {
			t.Errorf("%v: rebuilt %v with status %d, want no store error and a 5xx", err, back, e.Status())
		}
	}
}

// Every code has a status of its own class, and no status is 500 by
// accident.
func TestEveryCodeHasItsStatus(t *testing.T) {
	seen := map[string]bool{}
	for _, code := range api.Codes() {
		if seen[code] {
			t.Errorf("code %s listed twice", code)
		}
		seen[code] = true
		if s := api.Status(code); s == http.StatusInternalServerError && code != api.CodeInternal {
			t.Errorf("code %s has status 500", code)
		}
	}
}

func TestAcquireRequestValidation(t *testing.T) {
	valid := api.AcquireRequest{JobID: "video_encode_12345", WorkerID: "worker-7"}
	tests := []struct {
		name  string
		edit  func(*api.AcquireRequest)
		field string
	}{
		{"no job", func(a *api.AcquireRequest) { a.JobID = "" }, "job_id"},
		{"a space in the job", func(a *api.AcquireRequest) { a.JobID = "a b" }, "job_id"},
		{"no worker", func(a *api.AcquireRequest) { a.WorkerID = "" }, "worker_id"},
		{"a control byte in the worker", func(a *api.AcquireRequest) { a.WorkerID = "w\x00" }, "worker_id"},
		{"a negative ttl", func(a *api.AcquireRequest) { a.TTLMS = -1 }, "ttl_ms"},
		{"evidence no longer than the ttl", func(a *api.AcquireRequest) { a.TTLMS, a.EvidenceTTLMS = 1000, 1000 }, "evidence_ttl_ms"},
		{"max crashes 1", func(a *api.AcquireRequest) { a.MaxCrashes = 1 }, "max_crashes"},
		{"a region with a space", func(a *api.AcquireRequest) { a.Region = "us east" }, "region"},
		{"a NUL in the command", func(a *api.AcquireRequest) { a.Command = []string{"a\x00b"} }, "command"},
		{"a negative pid", func(a *api.AcquireRequest) { a.PID = -1 }, "pid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := valid
			tc.edit(&a)
			_, err := a.ToStore()
			var fe *api.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("ToStore() = %v, want a FieldError naming %s", err, tc.field)
			}
		})
	}
	// The seed's request alone gets the defaults of `leasectl run`.
	req, err := valid.ToStore()
	if err != nil {
		t.Fatal(err)
	}
	if req.TTL != supervise.DefaultTTL || req.EvidenceTTL != supervise.DefaultEvidenceTTL || req.MaxCrashes != supervise.DefaultMaxCrashes {
		t.Errorf("defaults ttl %s evidence %s max crashes %d, want leasectl run's %s %s %d", req.TTL, req.EvidenceTTL, req.MaxCrashes,
			supervise.DefaultTTL, supervise.DefaultEvidenceTTL, supervise.DefaultMaxCrashes)
	}
}

// A request crosses the wire and back unchanged, but for durations, which
// are whole milliseconds rounded up (a TTL never shrinks).
func TestAcquireRequestRoundTrip(t *testing.T) {
	req := leasestore.AcquireRequest{
		Job: "j", Holder: "h:1:ab", Host: "h", PID: 1, Command: []string{"a", "b"}, TTL: 1500*time.Millisecond + 1,
		EvidenceTTL: time.Hour, MaxCrashes: 3, MinInterval: time.Minute, Region: "us-east-1", Deadline: t1,
	}
	a := api.FromAcquireRequest(req)
	back, err := a.ToStore()
	if err != nil {
		t.Fatal(err)
	}
	if back.TTL != 1501*time.Millisecond {
		t.Errorf("TTL %s came back as %s, want it rounded up to 1.501s", req.TTL, back.TTL)
	}
	back.TTL = req.TTL
	if !back.Deadline.Equal(req.Deadline) {
		t.Errorf("deadline %s came back as %s", req.Deadline, back.Deadline)
	}
	back.Deadline = req.Deadline
	if !reflect.DeepEqual(back, req) {
		t.Errorf("round trip\n got %+v\nwant %+v", back, req)
	}
}

func TestExecutionState(t *testing.T) {
	completed := &leasestore.LastOutcome{Outcome: leasestore.Outcome{Result: leasestore.ResultCompleted}}
	failed := &leasestore.LastOutcome{Outcome: leasestore.Outcome{Result: leasestore.ResultFailed}}
	tests := []struct {
		st   leasestore.JobStatus
		want string
	}{
		{leasestore.JobStatus{}, "PENDING"},
		{leasestore.JobStatus{Holder: &leasestore.Holder{}, LastOutcome: completed}, "RUNNING"},
		{leasestore.JobStatus{LastOutcome: completed}, "COMPLETED"},
		{leasestore.JobStatus{LastOutcome: failed}, "PENDING"},
		{leasestore.JobStatus{Quarantine: &leasestore.Quarantine{}, LastOutcome: completed}, "FAILED"},
	}
	for _, tc := range tests {
		if got := api.ExecutionState(&tc.st); got != tc.want {
			t.Errorf("ExecutionState(%+v) = %s, want %s", tc.st, got, tc.want)
		}
	}
}

// A heartbeat carries the worker's round trip in whole microseconds, and a
// holder brings it back; a heartbeat without one (an older client) renews
// with none.
func TestRoundTripsCrossTheWire(t *testing.T) {
	l := &leasestore.Lease{Job: "j", Holder: "w", Token: 7, TTL: 1500 * time.Millisecond, RTT: 1234*time.Microsecond + 999}
	h := api.FromRenew(l)
	back, err := h.Validate()
	if err != nil {
		t.Fatal(err)
	}
	if h.RTTUS != 1234 || back.RTT != 1234*time.Microsecond || back.TTL != l.TTL {
		t.Errorf("heartbeat %+v came back as %+v, want rtt 1.234ms and the TTL", h, back)
	}
	h.RTTUS = 0
	if back, err := h.Validate(); err != nil || back.RTT != 0 {
		t.Errorf("a heartbeat without rtt_us: %+v, %v; want a renewal with no round trip", back, err)
	}
	h.RTTUS = -1
	var fe *api.FieldError
	if _, err := h.Validate(); !errors.As(err, &fe) || fe.Field != "rtt_us" {
		t.Errorf("a negative rtt_us: %v, want a FieldError naming it", err)
	}
	holder := leasestore.Holder{Job: "j", Worker: "w", Token: 7, StartedAt: t0, ExpiresAt: t1, ReadAt: t0, LastRTT: 2500 * time.Microsecond}
	wire := api.FromHolder(holder)
	if got := wire.ToStore(); !reflect.DeepEqual(got, holder) {
		t.Errorf("holder round trip\n got %+v\nwant %+v", got, holder)
	}
}

func TestNoteRequestsMayNotSignAsLeasectl(t *testing.T) {
	var fe *api.FieldError
	if _, _, err := (&api.NoteRequest{JobID: "j", By: leasestore.ByLeasectl, Reason: "r"}).Validate(); !errors.As(err, &fe) || fe.Field != "by" {
		t.Errorf("a note by %q: %v, want a by field error", leasestore.ByLeasectl, err)
	}
	if _, note, err := (&api.NoteRequest{JobID: "j", By: "alice@ops", Reason: "r"}).Validate(); err != nil || note.By != "alice@ops" {
		t.Errorf("a note by alice@ops: %+v, %v", note, err)
	}
}
