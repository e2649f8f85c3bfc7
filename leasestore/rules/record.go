package rules

import (
	"slices"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Record is everything the rules read and write of one job but its history,
// which they only append to (Step.Events) and, for a late outcome, read.
// The JSON names are those the embedded store has always written.
type Record struct {
	Job        string `json:"job,omitempty"`
	LastToken  int64  `json:"last_token,omitempty"`
	Attempts   int64  `json:"attempts,omitempty"`
	Crashes    int    `json:"crashes,omitempty"`
	MaxCrashes int    `json:"max_crashes,omitempty"` // threshold of the last run
	LastHolder string `json:"last_holder,omitempty"`
	LastHost   string `json:"last_host,omitempty"`
	// Region is recorded by the job's first grant that names one.
	Region      string                  `json:"region,omitempty"`
	LastSuccess time.Time               `json:"last_success,omitzero"`
	Quarantine  *leasestore.Quarantine  `json:"quarantine,omitempty"`
	LastOutcome *leasestore.LastOutcome `json:"last_outcome,omitempty"`
	// Slots is the job's number of slots, as its last grant asked for it
	// (AcquireRequest.Slots); 0 is one. The job's runs in flight were all
	// granted with it.
	Slots int `json:"slots,omitempty"`
	// Runs are the runs in flight, each with its liveness and evidence, in
	// the order of their slots; none when the job has none. A job of one
	// slot has at most one.
	Runs []*Run `json:"runs,omitempty"`
	// Queue is the job's waiters, oldest first (AcquireRequest.Wait); a
	// waiter past its Until has lapsed, and is dropped by the next change.
	Queue []leasestore.Waiter `json:"queue,omitempty"`
	// Abandoned is the last holder that gave up on its grant (RecordLate
	// with Token 0): its Acquire is refused.
	Abandoned string `json:"abandoned,omitempty"`
	// Expect is the job's expectation (expect.go); nil: none.
	Expect *leasestore.Expectation `json:"expect,omitempty"`
}

// Run is a run's liveness (until LiveUntil) and crash evidence (until
// EvidenceUntil). The rules never change a Run in place: a changed run is a
// new value, so a caller that kept the record's previous Run pointer can
// tell what changed.
type Run struct {
	Holder        string        `json:"holder"`
	Token         int64         `json:"token"`
	Slot          int           `json:"slot,omitempty"` // from 0
	Host          string        `json:"host"`
	PID           int           `json:"pid"`
	Command       []string      `json:"command"`
	Started       time.Time     `json:"started"`
	Attempt       int64         `json:"attempt"`
	TTL           time.Duration `json:"ttl"`
	EvidenceTTL   time.Duration `json:"evidence_ttl"`
	MaxCrashes    int           `json:"max_crashes"`
	LiveUntil     time.Time     `json:"live_until,omitzero"`
	EvidenceUntil time.Time     `json:"evidence_until,omitzero"`
	// RTT is the holder's last renewal round trip, as it reported it.
	RTT time.Duration `json:"rtt,omitempty"`
	// Stop is an operator's request that the run stop; nil: none.
	Stop *leasestore.StopRequest `json:"stop,omitempty"`
}

// Step is what a transition asks of the store besides writing the record
// back.
type Step struct {
	// Events are to be appended to the job's history, in order, each
	// already stamped with the transition's time.
	Events []leasestore.Event
	// Wake: the job's waiters are to be woken (a release notification):
	// the run ended, or the job left quarantine.
	Wake bool
	// Tokens: the job's fencing state changed (a grant or an end of a run),
	// for the token feed.
	Tokens bool
}

func (s *Step) record(now time.Time, e leasestore.Event) {
	e.At = now
	s.Events = append(s.Events, e)
}

// Live reports whether the run is live at now.
func (u *Run) Live(now time.Time) bool { return now.Before(u.LiveUntil) }

// Evidence reports whether the run's evidence has not expired at now.
func (u *Run) Evidence(now time.Time) bool { return now.Before(u.EvidenceUntil) }

// Crashed reports whether the run has evidence without liveness at now: its
// supervisor vanished, and its crash is not yet counted.
func (u *Run) Crashed(now time.Time) bool { return u.Evidence(now) && !u.Live(now) }

// Live reports whether the job has a live run at now.
func (r *Record) Live(now time.Time) bool { return len(r.LiveRuns(now)) > 0 }

// LiveRuns are the job's runs live at now, by slot.
func (r *Record) LiveRuns(now time.Time) []*Run {
	var live []*Run
	for _, u := range r.Runs {
		if u.Live(now) {
			live = append(live, u)
		}
	}
	return live
}

// LastLive reports whether the run granted the job's last token is live at
// now: what a token feed reports as the job's fencing state.
func (r *Record) LastLive(now time.Time) bool {
	return slices.ContainsFunc(r.LiveRuns(now), func(u *Run) bool { return u.Token == r.LastToken })
}

// Crashed reports whether the job has a run with evidence without liveness
// at now: a run whose supervisor vanished, not yet counted.
func (r *Record) Crashed(now time.Time) bool { return r.crashedRun(now) != nil }

// crashedRun is the job's first run, by slot, that crashed at now; nil
// when none did.
func (r *Record) crashedRun(now time.Time) *Run {
	for _, u := range r.Runs {
		if u.Crashed(now) {
			return u
		}
	}
	return nil
}

// slots is the job's number of slots, at least one.
func (r *Record) slots() int { return max(r.Slots, 1) }

// runOf is the job's run with token (and, when holder is not empty,
// holder) whose evidence is there at now; nil when there is none.
func (r *Record) runOf(holder string, token int64, now time.Time) *Run {
	for _, u := range r.Runs {
		if u.Token == token && (holder == "" || u.Holder == holder) && u.Evidence(now) {
			return u
		}
	}
	return nil
}

// replace puts run v in the place of u. The record's slice is copied, never
// written through, so a caller that kept the previous one can tell what
// changed.
func (r *Record) replace(u, v *Run) {
	runs := slices.Clone(r.Runs)
	runs[slices.Index(runs, u)] = v
	r.Runs = runs
}

// drop takes run u out of the job's runs, copying the slice as replace does.
func (r *Record) drop(u *Run) {
	r.Runs = slices.DeleteFunc(slices.Clone(r.Runs), func(v *Run) bool { return v == u })
	if len(r.Runs) == 0 {
		r.Runs = nil
	}
}

// Known reports whether the record holds anything: a job the store never
// saw has a zero record.
func (r *Record) Known() bool {
	return r.LastToken != 0 || r.Quarantine != nil || len(r.Runs) > 0 ||
		r.Expect != nil
}

// expiry is now+ttl at the microsecond resolution of the tokens and the
// stores' clocks.
func expiry(now time.Time, ttl time.Duration) time.Time {
	return now.Add(ttl).Truncate(time.Microsecond)
}

// crash describes the job's run u as a crash detected at now, counted as
// the next consecutive one.
func (r *Record) crash(u *Run, now time.Time) *leasestore.Crash {
	return &leasestore.Crash{
		Job: r.Job, Holder: u.Holder, Host: u.Host, PID: u.PID, Token: u.Token,
		Command: u.Command, StartedAt: u.Started, StaleSince: u.LiveUntil, DetectedAt: now,
		Crashes: r.Crashes + 1,
	}
}

// Holder describes the job's run u as a live lease.
func (r *Record) Holder(u *Run) leasestore.Holder {
	return leasestore.Holder{
		Job: r.Job, Worker: u.Holder, Host: u.Host, PID: u.PID, Token: u.Token, Attempt: u.Attempt, Slot: u.Slot,
		Command: u.Command, StartedAt: u.Started, ExpiresAt: u.LiveUntil, LastRTT: u.RTT, Stop: u.Stop,
	}
}
