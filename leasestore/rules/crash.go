package rules

import (
	"fmt"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// staleDetail is the history detail of a crash found by op ("acquire",
// "scan"): every store words it the same (docs/semantics.md, History
// events).
func staleDetail(op string) string {
	return "supervisor vanished: liveness expired, found by " + op
}

// countCrash counts the job's run u as a crash at now, exactly once: it
// drops the run's evidence in the same step, quarantines the job (as a
// whole, whatever its other slots run) at the run's own threshold, and
// wakes waiters. reported is the run's own outcome when it released itself
// as crashed, which its crashed event carries; empty when its supervisor
// vanished.
func (r *Record) countCrash(s *Step, now time.Time, u *Run, reported leasestore.Result, detail string) *leasestore.Crash {
	c := r.crash(u, now)
	r.Crashes = c.Crashes
	s.record(now, leasestore.Event{Kind: leasestore.EventCrashed, Worker: u.Holder, Token: u.Token,
		Result: reported, Detail: detail})
	r.drop(u)
	if r.Crashes >= u.MaxCrashes && r.Quarantine == nil {
		reason := fmt.Sprintf("%d consecutive crashes", r.Crashes)
		r.Quarantine = &leasestore.Quarantine{
			Job: r.Job, Crashes: r.Crashes, Since: now, Reason: reason, By: leasestore.ByLeasectl,
			LastHolder: u.Holder, LastHost: u.Host,
		}
		s.record(now, leasestore.Event{Kind: leasestore.EventQuarantined, Worker: u.Holder, Token: u.Token,
			Detail: "by " + leasestore.ByLeasectl + ": " + reason})
		c.Quarantined = true
	}
	s.Wake, s.Tokens = true, true
	return c
}

// Reap is the reaper's step on one job at now: each run whose evidence is
// there without liveness is counted as a crash (returned, by slot); a run
// whose evidence expired unseen is dropped without being counted, as an
// expired Redis key would be.
func Reap(r *Record, now time.Time) (Step, []leasestore.Crash) {
	var s Step
	var crashes []leasestore.Crash
	for _, u := range r.Runs {
		switch {
		case u.Live(now):
		case u.Crashed(now):
			crashes = append(crashes, *r.countCrash(&s, now, u, "", staleDetail("scan")))
		default:
			r.drop(u)
		}
	}
	return s, crashes
}

// Quarantine puts the job in quarantine at now by an operator's decision,
// or records the operator's new note on a quarantine already there.
func Quarantine(r *Record, note leasestore.Note, now time.Time) Step {
	var s Step
	q := leasestore.Quarantine{Job: r.Job, Since: now, LastHolder: r.LastHolder, LastHost: r.LastHost}
	if r.Quarantine != nil {
		q = *r.Quarantine
	}
	q.By, q.Reason, q.Crashes = note.By, note.Reason, r.Crashes
	r.Quarantine = &q
	s.record(now, leasestore.Event{Kind: leasestore.EventQuarantined, Worker: note.By, Detail: noteDetail(note)})
	return s
}

// ReleaseQuarantine lets the job run again at now and resets its crash
// count. It returns ErrNotQuarantined when the job was not quarantined.
func ReleaseQuarantine(r *Record, note leasestore.Note, now time.Time) (Step, error) {
	var s Step
	if r.Quarantine == nil {
		return s, fmt.Errorf("job %q: %w", r.Job, leasestore.ErrNotQuarantined)
	}
	r.Quarantine = nil
	r.Crashes = 0
	s.record(now, leasestore.Event{Kind: leasestore.EventUnquarantine, Worker: note.By, Detail: noteDetail(note)})
	s.Wake = true
	return s, nil
}

func noteDetail(note leasestore.Note) string {
	return fmt.Sprintf("by %s: %s", note.By, note.Reason)
}

// Status is what leasestore.Operator.Status reports of the job at now,
// given its history (oldest first).
func Status(r *Record, history []leasestore.Event, now time.Time) *leasestore.JobStatus {
	st := &leasestore.JobStatus{
		Job: r.Job, State: leasestore.StateIdle, Now: now, Region: r.Region, LastToken: r.LastToken, Attempts: r.Attempts,
		Crashes: r.Crashes, MaxCrashes: r.MaxCrashes, Quarantine: r.Quarantine,
		LastOutcome: r.LastOutcome, LastSuccess: r.LastSuccess, History: history,
		Expect: r.Expect, Slots: r.slots(), Queue: r.waiting(now),
	}
	for _, u := range r.LiveRuns(now) {
		st.Holders = append(st.Holders, r.Holder(u))
	}
	if len(st.Holders) > 0 {
		st.Holder = &st.Holders[0]
	}
	switch {
	case r.Quarantine != nil:
		st.State = leasestore.StateQuarantined
	case st.Holder != nil:
		st.State = leasestore.StateRunning
	case r.Crashed(now):
		st.State = leasestore.StateCrashed
		st.Crashed = r.crash(r.crashedRun(now), now)
	}
	return st
}
