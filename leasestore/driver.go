package leasestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
)

// Driver is what a store package implements, as Go CDK's blob/driver.Bucket
// is for blob: the operations of Leaser and Operator on its backend, its
// side of the token feed, its limits, and Close. The portable Store wraps
// a Driver and does, once for every driver, what is not the backend's
// business: it checks job IDs, TTLs and slots against Limits before any
// I/O, refuses every call after Close, keeps the token feed's watches and
// their fan-out (TokenHub), and gives callers one type to hold.
//
// A driver is given only valid requests and only before Close. Every
// method is safe for concurrent use. ctx bounds the whole call, including
// retries and connection set-up; a driver that cannot answer in time
// returns an error for which errors.Is(err, ErrUnavailable) holds, made by
// Unavailable so that its message is one line without secrets.
//
// The contract's types live in this package beside Driver, where Go CDK
// keeps a second set in blob/driver: the portable Store passes the
// requests and records through unchanged, so one vocabulary serves both
// sides.
type Driver interface {
	Leaser
	Operator
	// StartTokens starts the driver's side of the token feed, which hands
	// what it hears to hub, and returns it. The portable Store calls it
	// once, for its first WatchTokens, and closes hub before it closes the
	// driver; the driver's Close stops the source. A failure reaches the
	// caller as an *UnavailableError, and the next WatchTokens calls
	// StartTokens again. Once started, the driver refuses another start
	// with ErrFeedStarted: a second Store wraps it.
	StartTokens(ctx context.Context, hub *TokenHub) (TokenSource, error)
	// Limits are the requests the store can honour; the portable Store
	// refuses others.
	Limits() Limits
	// Close releases the store's connections and files. The portable
	// Store calls it once, after the calls in flight have returned, and
	// makes no call after it.
	Close() error
}

// Unavailable is the *UnavailableError of a driver's failure in op:
// explained is the cause in an operator's words (its first line is kept,
// and secrets are scrubbed from it); err stays reachable for errors.Is and
// errors.As. An error that already holds an *UnavailableError is returned as it is.
func Unavailable(op, explained string, err error, secrets ...string) error {
	var ue *UnavailableError
	if errors.As(err, &ue) {
		return err
	}
	return &UnavailableError{Op: op, Err: &DriverError{Msg: Scrub(FirstLine(explained), secrets...), Err: err}}
}

// DriverError is a driver's failure explained in one line, for an
// UnavailableError; the original error stays reachable for errors.Is and
// errors.As.
type DriverError struct {
	Msg string
	Err error
}

// Error is the explanation.
func (e *DriverError) Error() string { return e.Msg }

// Unwrap returns the original error.
func (e *DriverError) Unwrap() error { return e.Err }

// ExplainTransport names, in an operator's words, a failure every driver
// meets on its way to its backend: no answer before the deadline, the call
// cancelled, the connection closed, refused or lost. server names the
// backend's address in messages ("Redis at host:6379"), backend the kind
// ("Redis"). ok is false for any other failure, which is the driver's to
// explain.
func ExplainTransport(server, backend string, err error) (msg string, ok bool) {
	var netErr net.Error
	var opErr *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Sprintf("no answer from %s before the deadline", server), true
	case errors.Is(err, context.Canceled):
		return "cancelled while talking to " + backend, true
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return server + " closed the connection", true
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return fmt.Sprintf("cannot connect to %s: %v", server, opErr.Err), true
	case errors.As(err, &opErr):
		return fmt.Sprintf("lost the connection to %s: %v", server, opErr.Err), true
	}
	return "", false
}

// FirstLine is the first line of s: a server's or library's error text
// can run over several, and a message of leasectl's is one line.
func FirstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
