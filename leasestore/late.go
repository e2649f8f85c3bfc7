package leasestore

import (
	"fmt"
	"strings"
	"time"
)

// ByLeasectl is Quarantine.By of a job quarantined for crashing, and the
// worker of the events leasectl itself records about a job.
const ByLeasectl = "leasectl"

// LateFix is what a late outcome corrects in a job's record, worked out from
// the job's history by CorrectLate, for the drivers that keep the history
// as Events (docs/semantics.md, RecordLate, step 2).
type LateFix struct {
	// Token is the run's token: the outcome's, or, when it had none, the one
	// the run's events carry; 0 when the history does not know the run.
	Token int64
	// Recorded: a late-outcome or released event of the run is in the
	// history already, so there is nothing to do.
	Recorded bool
	// Withdrawn: the run's crash was counted and still counts; Crashes and
	// CrashedAt are set.
	Withdrawn bool
	// Crashes is the job's consecutive crashes once the crash is withdrawn.
	Crashes int
	// CrashedAt is when the withdrawn crash was counted.
	CrashedAt time.Time
	// Success is the completion of a completed run: its start plus its
	// duration; zero when it did not complete, or its start fell out of the
	// history.
	Success time.Time
	// started is the run's start, from its acquired event; zero if unknown.
	started time.Time
}

// CorrectLate works out what the late outcome out of holder's run (token,
// or 0 when unknown) corrects, given the job's history (oldest first) and
// its consecutive crashes now.
func CorrectLate(history []Event, holder string, token int64, out Outcome, crashes int) LateFix {
	fix := LateFix{Token: token, Crashes: crashes}
	ofRun := func(e Event) bool { return e.Worker == holder && (token == 0 || e.Token == token) }
	crashed := -1
	for i, e := range history {
		switch {
		case e.Kind == EventCrashed && ofRun(e):
			crashed, fix.Token = i, e.Token
		case e.Kind == EventAcquired && ofRun(e):
			fix.started, fix.Token = e.At, e.Token
		case e.Kind == EventReleased && ofRun(e):
			// Released in time after all (or by RecordLate itself, while
			// its evidence was there): the outcome is recorded.
			fix.Token, fix.Recorded = e.Token, true
		}
	}
	if fix.Recorded || fix.Token != 0 && LateRecorded(history, holder, fix.Token) {
		fix.Recorded = true
		return fix
	}
	if crashed < 0 {
		return fix
	}
	for _, e := range history[crashed+1:] {
		if resetsCrashes(e, fix.Token) {
			return fix
		}
	}
	fix.Withdrawn, fix.CrashedAt = true, history[crashed].At
	fix.Crashes = max(0, crashes-1)
	if out.Result == ResultCompleted {
		// A completion at this run's place would have left only the crashes
		// counted after it, less those withdrawn since.
		fix.Crashes = 0
		for _, e := range history[crashed+1:] {
			if e.Kind == EventCrashed && !LateRecorded(history, e.Worker, e.Token) {
				fix.Crashes++
			}
		}
		if !fix.started.IsZero() {
			fix.Success = fix.started.Add(out.Duration)
		}
	}
	return fix
}

// LiftsQuarantine reports whether f lifts the job's quarantine, made by by
// at since: f withdraws a crash, leasectl made the quarantine at or after
// that crash, in its streak, and the crashes left (f.Crashes) are below the
// job's maxCrashes (docs/semantics.md, RecordLate, step 2).
func (f LateFix) LiftsQuarantine(by string, since time.Time, maxCrashes int) bool {
	return f.Withdrawn && by == ByLeasectl && !since.Before(f.CrashedAt) && f.Crashes < maxCrashes
}

// LiftEvent is the released-from-quarantine event of a quarantine f lifts.
func (f LateFix) LiftEvent() Event {
	return Event{Kind: EventUnquarantine, Worker: ByLeasectl,
		Detail: fmt.Sprintf("by %s: the crash of token %d that led to it was withdrawn: its outcome arrived late", ByLeasectl, f.Token)}
}

// LateEvent is the late-outcome event that records late with f, saying
// what it corrected; lifted: f lifted the job's quarantine.
func (f LateFix) LateEvent(late LateOutcome, lifted bool) Event {
	detail := late.Detail()
	if f.Withdrawn {
		detail += "; the crash counted for it is withdrawn"
	}
	if lifted {
		detail += "; the quarantine it led to is lifted"
	}
	return Event{Kind: EventLateOutcome, Worker: late.Holder, Token: f.Token, Detail: detail}
}

// LastOutcome is the job's last outcome once late is recorded with f at
// at: late's, finished at, after the crash counted for the run, which
// Status readers compare it with; or last, if a later run's is recorded.
func (f LateFix) LastOutcome(late LateOutcome, last *LastOutcome, at time.Time) *LastOutcome {
	if last != nil && last.Token >= f.Token {
		return last
	}
	return &LastOutcome{Outcome: late.Outcome, Worker: late.Holder, Token: f.Token, FinishedAt: at}
}

// LateRecorded reports whether history holds a late-outcome event of the
// run of holder with token: its outcome was recorded late already.
func LateRecorded(history []Event, holder string, token int64) bool {
	for _, e := range history {
		if e.Kind == EventLateOutcome && e.Worker == holder && e.Token == token {
			return true
		}
	}
	return false
}

// resetsCrashes reports whether event e, recorded after the crash of the run
// with token, ends the streak that crash belongs to: a completed run after
// it, or an operator's release from quarantine.
func resetsCrashes(e Event, token int64) bool {
	completed := strings.HasPrefix(e.Detail, string(ResultCompleted)+" ")
	switch e.Kind {
	case EventReleased:
		return completed
	case EventLateOutcome:
		return completed && e.Token > token
	case EventUnquarantine:
		return e.Worker != ByLeasectl
	}
	return false
}

// String says in words what the correction did.
func (c Correction) String() string {
	switch {
	case c.Released:
		return "the run's lease was still there and is released"
	case c.QuarantineLifted:
		return fmt.Sprintf("the crash counted for the run is withdrawn and the quarantine it led to lifted (%d consecutive crashes)", c.Crashes)
	case c.CrashWithdrawn:
		return fmt.Sprintf("the crash counted for the run is withdrawn (%d consecutive crashes)", c.Crashes)
	default:
		return "recorded; nothing else to correct"
	}
}
