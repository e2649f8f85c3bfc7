package rules

import (
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
	// Run is the current run's liveness and evidence; nil when the job has
	// none.
	Run *Run `json:"run,omitempty"`
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

// Live reports whether the job's run is live at now.
func (r *Record) Live(now time.Time) bool {
	return r.Run != nil && now.Before(r.Run.LiveUntil)
}

// Evidence reports whether the job's run left evidence that has not
// expired at now.
func (r *Record) Evidence(now time.Time) bool {
	return r.Run != nil && now.Before(r.Run.EvidenceUntil)
}

// Crashed reports whether the job has evidence without liveness at now: a
// run whose supervisor vanished, not yet counted.
func (r *Record) Crashed(now time.Time) bool {
	return r.Evidence(now) && !r.Live(now)
}

// Known reports whether the record holds anything: a job the store never
// saw has a zero record.
func (r *Record) Known() bool {
	return r.LastToken != 0 || r.Quarantine != nil || r.Run != nil ||
		r.Expect != nil
}

// expiry is now+ttl at the microsecond resolution of the tokens and the
// stores' clocks.
func expiry(now time.Time, ttl time.Duration) time.Time {
	return now.Add(ttl).Truncate(time.Microsecond)
}

// crash describes the job's run as a crash detected at now, counted as the
// next consecutive one.
func (r *Record) crash(now time.Time) *leasestore.Crash {
	u := r.Run
	return &leasestore.Crash{
		Job: r.Job, Holder: u.Holder, Host: u.Host, PID: u.PID, Token: u.Token,
		Command: u.Command, StartedAt: u.Started, StaleSince: u.LiveUntil, DetectedAt: now,
		Crashes: r.Crashes + 1,
	}
}

// Holder describes the job's run as a live lease.
func (r *Record) Holder() *leasestore.Holder {
	u := r.Run
	return &leasestore.Holder{
		Job: r.Job, Worker: u.Holder, Host: u.Host, PID: u.PID, Token: u.Token, Attempt: u.Attempt,
		Command: u.Command, StartedAt: u.Started, ExpiresAt: u.LiveUntil, LastRTT: u.RTT, Stop: u.Stop,
	}
}
