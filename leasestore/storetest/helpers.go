package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// The helpers below are exported for drivers' own tests, which check what
// only their store has (files, connections, server faults) with the same
// requests and outcomes as the suite.

// Timing of the suite. Leases the test relies on stay live for a minute;
// leases it lets expire are short, and it waits well past their expiry, so a
// noisy machine does not turn the margins into flakes.
const (
	// LongTTL is the TTL of leases a test relies on staying live.
	LongTTL = time.Minute
	// ShortTTL is the TTL of leases a test lets expire.
	ShortTTL = 200 * time.Millisecond
	// ExpiryWait is how long a test waits for a ShortTTL lease to expire.
	ExpiryWait = ShortTTL + 300*time.Millisecond
	// EvidenceTTL is the evidence TTL of Request.
	EvidenceTTL = time.Hour
	// HangGuard bounds every store call, to catch hangs.
	HangGuard = 5 * time.Second
)

// Ctx bounds one store call by HangGuard; the contract has every call
// return by then.
func Ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(t.Context(), HangGuard)
	t.Cleanup(cancel)
	return c
}

// Open opens a store with a driver's open on rawURL in namespace, failing
// the test on an error (which names the URL without its secrets), and
// closes it when the test ends.
func Open[S leasestore.Driver](t testing.TB, open func(rawURL, namespace string) (S, error), rawURL, namespace string) S {
	t.Helper()
	s, err := open(rawURL, namespace)
	if err != nil {
		t.Fatalf("Open(%s): %v", leasestore.Redact(rawURL), err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Request is an acquire request of worker for job with the given TTL.
func Request(job, worker string, ttl time.Duration) leasestore.AcquireRequest {
	return leasestore.AcquireRequest{
		Job: job, Holder: worker, Host: "host-" + worker, PID: len(worker) + 1000,
		Command: []string{"/bin/run", worker}, TTL: ttl, EvidenceTTL: EvidenceTTL, MaxCrashes: 3,
	}
}

// Acquire acquires req, failing the test on an error.
func Acquire(t testing.TB, s Client, req leasestore.AcquireRequest) *leasestore.Lease {
	t.Helper()
	l, err := s.Acquire(Ctx(t), req)
	if err != nil {
		t.Fatalf("Acquire(%s by %s): %v", req.Job, req.Holder, err)
	}
	return l
}

// Release releases l with the typical outcome of res, failing the test on
// an error.
func Release(t testing.TB, s Client, l *leasestore.Lease, res leasestore.Result) {
	t.Helper()
	if err := s.Release(Ctx(t), l, Outcome(res)); err != nil {
		t.Fatalf("Release(%s token %d, %s): %v", l.Job, l.Token, res, err)
	}
}

// Outcome is a typical outcome of result res.
func Outcome(res leasestore.Result) leasestore.Outcome {
	switch res {
	case leasestore.ResultCompleted:
		return leasestore.Outcome{Result: res, ExitCode: 0, Duration: time.Second}
	case leasestore.ResultCrashed:
		return leasestore.Outcome{Result: res, ExitCode: -1, Signal: 11, Duration: time.Second}
	case leasestore.ResultNotStarted:
		return leasestore.Outcome{Result: res, ExitCode: 127}
	default:
		return leasestore.Outcome{Result: res, ExitCode: 3, Duration: time.Second}
	}
}

// Status reads job's status, failing the test on an error.
func Status(t testing.TB, s Client, job string) *leasestore.JobStatus {
	t.Helper()
	st, err := s.Status(Ctx(t), job)
	if err != nil {
		t.Fatalf("Status(%s): %v", job, err)
	}
	return st
}

// CrashRun acquires job with ShortTTL and lets the lease expire without
// releasing it, as a SIGKILLed supervisor would. It is for stores without
// a minimum TTL (Abilities.MinTTL); the suite itself waits for each store
// to report the expiry.
func CrashRun(t testing.TB, s Client, job, worker string, maxCrashes int) *leasestore.Lease {
	t.Helper()
	req := Request(job, worker, ShortTTL)
	req.MaxCrashes = maxCrashes
	l := Acquire(t, s, req)
	time.Sleep(ExpiryWait)
	return l
}

// WantUnavailable fails t unless err is an *leasestore.UnavailableError
// whose one-line message names cause and holds none of the secrets: how
// every store must report a backend it cannot use.
func WantUnavailable(t testing.TB, err error, cause string, secrets ...string) {
	t.Helper()
	var ue *leasestore.UnavailableError
	if !errors.As(err, &ue) || !errors.Is(err, leasestore.ErrUnavailable) {
		t.Fatalf("got %v (%T), want an *UnavailableError", err, err)
	}
	msg := err.Error()
	t.Logf("error: %s", msg)
	if !strings.Contains(msg, cause) {
		t.Errorf("error %q does not say %q", msg, cause)
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error %q spans several lines", msg)
	}
	for _, s := range secrets {
		if strings.Contains(msg, s) {
			t.Errorf("error %q reveals the secret %q", msg, s)
		}
	}
}

// WantFrozenCallsReturn checks what the contract says of a server that
// stopped answering, as a SIGSTOPped one: a renewal of l on s, an acquire
// on a new client from open and a subscription on s each return,
// unavailable with cause and without the secrets, once their deadline
// passed (HangGuard catches a call that does not).
func WantFrozenCallsReturn(t *testing.T, s Client, l *leasestore.Lease, open func(testing.TB) leasestore.Driver,
	cause string, secrets ...string) {
	t.Helper()
	const deadline = 300 * time.Millisecond
	// Each call is made ready in its subtest (a new client is opened
	// there), then made in a goroutine of its own.
	calls := map[string]func(t *testing.T) func(ctx context.Context) error{
		"renew": func(*testing.T) func(ctx context.Context) error {
			return func(ctx context.Context) error { return s.Renew(ctx, l) }
		},
		"acquire on a new client": func(t *testing.T) func(ctx context.Context) error {
			c := leasestore.New(open(t))
			return func(ctx context.Context) error {
				_, err := c.Acquire(ctx, Request("other", "w2", LongTTL))
				return err
			}
		},
		"subscribe": func(*testing.T) func(ctx context.Context) error {
			return func(ctx context.Context) error {
				sub, err := s.Subscribe(ctx, "job", "")
				if err == nil {
					sub.Close()
				}
				return err
			}
		},
	}
	for name, ready := range calls {
		t.Run(name, func(t *testing.T) {
			call := ready(t)
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- call(ctx) }()
			select {
			case err := <-done:
				WantUnavailable(t, err, cause, secrets...)
			case <-time.After(HangGuard):
				t.Fatalf("call still blocked %s after its %s deadline", HangGuard, deadline)
			}
		})
	}
}

// Client is what the suite's helpers use of a store: the portable
// leasestore.Store the suite tests, or a driver beneath it, as a driver's
// own tests hold it.
type Client interface {
	leasestore.Leaser
	leasestore.Operator
}
