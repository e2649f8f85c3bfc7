package leasestore

import (
	"errors"
	"fmt"
	"time"
)

// Expectation is how often a job must complete successfully: a dead-man's
// switch. Past its due time (Due) without a success the job is overdue,
// which the reaper reports (Operator.Overdue), so that a job that silently
// stopped running (a cron line deleted, a host gone, a timer disabled) is
// noticed like one that crashed.
type Expectation struct {
	// Every is the longest time allowed between two successful runs.
	Every time.Duration
	// Grace is added to Every before the job counts as overdue: how late a
	// run may start or how long it may take.
	Grace time.Duration
	// Since is the store's clock when the expectation (with this Every and
	// Grace) was set: the start of the first period of a job that never
	// succeeded. The store sets it; a request's is ignored.
	Since time.Time
}

// MaxExpectation bounds Every and Grace: a year, far beyond any schedule,
// and small enough that every store's time arithmetic stays exact.
const MaxExpectation = 366 * 24 * time.Hour

// Validate checks x before any I/O: Every positive, Grace not negative,
// both at most MaxExpectation, in whole milliseconds (the registry's API
// carries milliseconds).
func (x Expectation) Validate() error {
	switch {
	case x.Every <= 0:
		return errors.New("an expectation's period (--every) must be positive")
	case x.Grace < 0:
		return errors.New("an expectation's grace must not be negative")
	case x.Every > MaxExpectation || x.Grace > MaxExpectation:
		return fmt.Errorf("an expectation's period and grace must be at most %s", MaxExpectation)
	case x.Every%time.Millisecond != 0 || x.Grace%time.Millisecond != 0:
		return errors.New("an expectation's period and grace must be whole milliseconds")
	}
	return nil
}

// Due is when a job with this expectation becomes overdue: lastSuccess
// (Since when the job never completed successfully) + Every + Grace. The
// job is overdue once the store's clock is past it.
func (x Expectation) Due(lastSuccess time.Time) time.Time {
	base := lastSuccess
	if base.IsZero() {
		base = x.Since
	}
	return base.Add(x.Every + x.Grace)
}

// Same reports whether x and y ask for the same period and grace, whatever
// their Since.
func (x Expectation) Same(y Expectation) bool {
	return x.Every == y.Every && x.Grace == y.Grace
}

// Overdue is a job past its expectation, as Operator.Overdue lists it.
type Overdue struct {
	Job    string
	Expect Expectation
	// LastSuccess is the job's last successful completion; zero when it
	// never completed successfully since the store knows it.
	LastSuccess time.Time
	// Due is when it became overdue (Expectation.Due).
	Due time.Time
	// Now is the store's clock when it was read.
	Now time.Time
}

// Silence is how long the job has gone without a success at Now: since its
// last success, or since its expectation was set when it never succeeded.
func (o Overdue) Silence() time.Duration {
	base := o.LastSuccess
	if base.IsZero() {
		base = o.Expect.Since
	}
	return o.Now.Sub(base)
}

// Overdue reports whether the job is past its expectation at st.Now.
func (st *JobStatus) Overdue() bool {
	return st.Expect != nil && st.Now.After(st.Expect.Due(st.LastSuccess))
}

// Detail is x in the words of the history event that sets it, by note's
// operator: "by alice@host: every 1h0m0s grace 10m0s: reason", or with x
// nil "by alice@host: cleared: reason".
func (x *Expectation) Detail(note Note) string {
	what := "cleared"
	if x != nil {
		what = fmt.Sprintf("every %s grace %s", x.Every, x.Grace)
	}
	s := fmt.Sprintf("by %s: %s", note.By, what)
	if note.Reason != "" {
		s += ": " + note.Reason
	}
	return s
}
