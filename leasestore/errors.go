package leasestore

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrLeaseLost means the caller's lease is no longer the job's live
	// lease: it expired, or the job was granted to someone else since.
	ErrLeaseLost = errors.New("leasestore: lease lost")
	// ErrUnavailable means the store could not be reached or refused to
	// work; *UnavailableError wraps the cause.
	ErrUnavailable = errors.New("leasestore: store unavailable")
	// ErrNotQuarantined means ReleaseQuarantine found the job not
	// quarantined.
	ErrNotQuarantined = errors.New("leasestore: job is not quarantined")
	// ErrNotRunning means Stop found no live lease on the job: nothing
	// runs to be stopped.
	ErrNotRunning = errors.New("leasestore: job is not running")
	// ErrForbidden means the store refused the operation to the caller's
	// credentials (a registry's token whose role may not do it): another
	// credential would be let in, retrying would not.
	ErrForbidden = errors.New("leasestore: operation forbidden to the caller's role")
)

// HeldError is returned by Acquire when another worker holds the lease
// (of a job of several slots, every slot), or when the slots free are
// promised to earlier waiters. The holder it names is the live lease that
// expires first; none (Holder empty) when a slot is free but earlier
// waiters come first.
type HeldError struct {
	Job       string
	Holder    string
	Host      string
	PID       int
	Token     int64
	Since     time.Time     // when the holder acquired it (store clock)
	ExpiresIn time.Duration // the holder's remaining liveness
	// Slots is the job's number of slots; 0 or 1: one.
	Slots int
	// Position is the request's place in the job's queue, from 1, when it
	// waits (AcquireRequest.Wait) on a store that keeps a queue; 0
	// otherwise. Waiting is how many wait in all.
	Position, Waiting int
}

// Error says who holds the job and for how long still, and where the
// request waits.
func (e *HeldError) Error() string {
	var b strings.Builder
	switch {
	case e.Holder == "":
		fmt.Fprintf(&b, "job %q has a free slot, promised to the runs that waited longer", e.Job)
	case e.Slots > 1:
		fmt.Fprintf(&b, "all %d slots of job %q are held; the first to expire is worker %s's (host %s, pid %d) since %s, in %s",
			e.Slots, e.Job, e.Holder, e.Host, e.PID, e.Since.UTC().Format(time.RFC3339), e.ExpiresIn.Round(time.Millisecond))
	default:
		fmt.Fprintf(&b, "job %q is held by worker %s (host %s, pid %d) since %s; its lease expires in %s",
			e.Job, e.Holder, e.Host, e.PID, e.Since.UTC().Format(time.RFC3339), e.ExpiresIn.Round(time.Millisecond))
	}
	if e.Position > 0 {
		fmt.Fprintf(&b, "; waiting %d of %d in its queue", e.Position, e.Waiting)
	}
	return b.String()
}

// QuarantinedError is returned by Acquire for a quarantined job.
type QuarantinedError struct {
	Quarantine
}

// Error says since when and why the job is quarantined.
func (e *QuarantinedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %q is quarantined since %s", e.Job, e.Since.UTC().Format(time.RFC3339))
	after := ""
	if e.Crashes > 0 {
		after = fmt.Sprintf("%d consecutive crashes", e.Crashes)
		fmt.Fprintf(&b, " after %s", after)
	}
	if e.LastHolder != "" {
		fmt.Fprintf(&b, " (last worker %s on %s)", e.LastHolder, e.LastHost)
	}
	// The stores' own reason for an automatic quarantine is what "after"
	// already said.
	if e.Reason != "" && e.Reason != after {
		fmt.Fprintf(&b, ": %s", e.Reason)
	}
	return b.String()
}

// TooSoonError is returned by Acquire when the job last completed
// successfully less than the requested minimum interval ago.
type TooSoonError struct {
	Job         string
	LastSuccess time.Time
	MinInterval time.Duration
	Age         time.Duration // time since the last success, by the store's clock
}

// Error says how long ago the job last succeeded.
func (e *TooSoonError) Error() string {
	return fmt.Sprintf("job %q completed successfully %s ago, less than --min-interval %s",
		e.Job, e.Age.Round(time.Millisecond), e.MinInterval)
}

// RegionError is returned by Acquire when the job belongs to another region
// than the request names.
type RegionError struct {
	Job       string
	Region    string // the job's, recorded by its first grant that named one
	Requested string // the request's
}

// Error names both regions.
func (e *RegionError) Error() string {
	return fmt.Sprintf("job %q belongs to region %s; this worker is in region %s", e.Job, e.Region, e.Requested)
}

// DeadlineError is returned by Acquire once the store's clock is past the
// request's Deadline: the job is no longer retried.
type DeadlineError struct {
	Job      string
	Deadline time.Time
	Now      time.Time // the store's clock (etcd: the acquiring host's)
}

// Error says when the deadline passed.
func (e *DeadlineError) Error() string {
	return fmt.Sprintf("job %q passed its ttl_deadline %s %s ago: it is no longer retried",
		e.Job, e.Deadline.UTC().Format(time.RFC3339), e.Now.Sub(e.Deadline).Round(time.Second))
}

// StaleTokenError is returned by CheckToken for a token that may no longer
// be used.
type StaleTokenError struct {
	Job     string
	Token   int64
	Current int64 // the job's current token; 0 if the store has none
	Live    bool  // whether the current token's lease is live
}

// Error says why the token may no longer be used, in the words of
// fence.StaleError: a token above every grant was never granted.
func (e *StaleTokenError) Error() string {
	switch {
	case e.Current == 0:
		return fmt.Sprintf("token %d is stale: job %q has no token in the store", e.Token, e.Job)
	case e.Token > e.Current:
		return fmt.Sprintf("token %d was never granted: job %q is at token %d", e.Token, e.Job, e.Current)
	case e.Token != e.Current:
		return fmt.Sprintf("token %d is stale: job %q is at token %d", e.Token, e.Job, e.Current)
	default:
		return fmt.Sprintf("token %d is stale: its lease on job %q is no longer live", e.Token, e.Job)
	}
}

// UnavailableError wraps the reason a store could not do its work. It
// matches ErrUnavailable with errors.Is.
type UnavailableError struct {
	Op  string // the operation, e.g. "acquire"
	Err error
}

// Error names the operation and the cause.
func (e *UnavailableError) Error() string {
	return fmt.Sprintf("store unavailable during %s: %v", e.Op, e.Err)
}

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }

// Is reports whether target is ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// RequestError is a request the store refused as malformed: a value the
// caller gave, such as a flag, that the store cannot take (a registry
// answering 400 names the field). Commands exit 64 on it, as on any other
// bad input.
type RequestError struct {
	Op     string
	Field  string
	Reason string
}

// Error names the operation, the field and why it was refused.
func (e *RequestError) Error() string {
	return fmt.Sprintf("%s: the store refused %s: %s", e.Op, e.Field, e.Reason)
}
