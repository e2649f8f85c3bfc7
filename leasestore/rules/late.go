package rules

import (
	"fmt"
	"strings"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// RecordLate records at now the outcome of a run that did not reach the
// store in time, given the job's history (oldest first), and undoes what
// its absence did (docs/semantics.md, RecordLate): while the run's evidence
// is there it is Release; once the run's crash was counted, it withdraws
// that crash from the consecutive crashes and lifts the quarantine leasectl
// made with it. With Token 0, the holder gave up on its grant: its Acquire
// is refused from now on, and it leaves the queue, waking the waiters
// while a slot is free, as Leave does.
func RecordLate(r *Record, history []leasestore.Event, late leasestore.LateOutcome, now time.Time) (Step, leasestore.Correction) {
	var s Step
	if late.Token == 0 {
		r.Abandoned = late.Holder
		r.leave(&s, late.Holder, now)
	}
	if u := r.lateRun(late, now); u != nil {
		r.end(&s, now, u, late.Outcome)
		return s, leasestore.Correction{Released: true, Crashes: r.Crashes}
	}
	fix := correctLate(history, late.Holder, late.Token, late.Outcome, r.Crashes)
	if fix.recorded || fix.token == 0 || fix.token > r.LastToken {
		return s, leasestore.Correction{Crashes: r.Crashes}
	}
	c := leasestore.Correction{CrashWithdrawn: fix.withdrawn, Crashes: fix.crashes}
	r.Crashes = fix.crashes
	if fix.success.After(r.LastSuccess) {
		r.LastSuccess = fix.success
	}
	if q := r.Quarantine; q != nil && fix.liftsQuarantine(q.By, q.Since, r.MaxCrashes) {
		r.Quarantine = nil
		s.record(now, leasestore.Event{Kind: leasestore.EventUnquarantine, Worker: leasestore.ByLeasectl,
			Detail: fmt.Sprintf("by %s: the crash of token %d that led to it was withdrawn: its outcome arrived late", leasestore.ByLeasectl, fix.token)})
		s.Wake = true
		c.QuarantineLifted = true
	}
	if last := r.LastOutcome; last == nil || last.Token < fix.token {
		r.LastOutcome = &leasestore.LastOutcome{Outcome: late.Outcome, Worker: late.Holder, Token: fix.token, FinishedAt: now}
	}
	detail := late.Detail()
	if fix.withdrawn {
		detail += "; the crash counted for it is withdrawn"
	}
	if c.QuarantineLifted {
		detail += "; the quarantine it led to is lifted"
	}
	s.record(now, leasestore.Event{Kind: leasestore.EventLateOutcome, Worker: late.Holder, Token: fix.token,
		Result: late.Result, Detail: detail})
	return s, c
}

// lateRun is the run late is the outcome of, while its evidence is there:
// the holder's run with late's token, or, with Token 0, the holder's run;
// nil when there is none.
func (r *Record) lateRun(late leasestore.LateOutcome, now time.Time) *Run {
	for _, u := range r.Runs {
		if u.Evidence(now) && u.Holder == late.Holder && (late.Token == 0 || u.Token == late.Token) {
			return u
		}
	}
	return nil
}

// lateFix is what a late outcome corrects in a job's record, worked out
// from the job's history by correctLate (docs/semantics.md, RecordLate,
// step 2).
type lateFix struct {
	// token is the run's token: the outcome's, or, when it had none, the one
	// the run's events carry; 0 when the history does not know the run.
	token int64
	// recorded: a late-outcome or released event of the run is in the
	// history already, so there is nothing to do.
	recorded bool
	// withdrawn: the run's crash was counted and still counts; crashes and
	// crashedAt are set.
	withdrawn bool
	// crashes is the job's consecutive crashes once the crash is withdrawn.
	crashes int
	// crashedAt is when the withdrawn crash was counted.
	crashedAt time.Time
	// success is the completion of a completed run: its start plus its
	// duration; zero when it did not complete, or its start fell out of the
	// history.
	success time.Time
}

// correctLate works out what the late outcome out of holder's run (token,
// or 0 when unknown) corrects, given the job's history (oldest first) and
// its consecutive crashes now.
func correctLate(history []leasestore.Event, holder string, token int64, out leasestore.Outcome, crashes int) lateFix {
	fix := lateFix{token: token, crashes: crashes}
	ofRun := func(e leasestore.Event) bool { return e.Worker == holder && (token == 0 || e.Token == token) }
	crashed := -1
	var started time.Time
	for i, e := range history {
		switch {
		case e.Kind == leasestore.EventCrashed && ofRun(e) && outcomeOf(e) != "":
			// It released itself as crashed: its outcome is recorded, and
			// the crash counted for it is no absence to undo.
			fix.token, fix.recorded = e.Token, true
		case e.Kind == leasestore.EventCrashed && ofRun(e):
			crashed, fix.token = i, e.Token
		case e.Kind == leasestore.EventAcquired && ofRun(e):
			started, fix.token = e.At, e.Token
		case e.Kind == leasestore.EventReleased && ofRun(e):
			// Released in time after all (or by RecordLate itself, while
			// its evidence was there): the outcome is recorded.
			fix.token, fix.recorded = e.Token, true
		}
	}
	if fix.recorded || fix.token != 0 && leasestore.LateRecorded(history, holder, fix.token) {
		fix.recorded = true
		return fix
	}
	if crashed < 0 {
		return fix
	}
	for _, e := range history[crashed+1:] {
		if resetsCrashes(e, fix.token) {
			return fix
		}
	}
	fix.withdrawn, fix.crashedAt = true, history[crashed].At
	fix.crashes = max(0, crashes-1)
	if out.Result == leasestore.ResultCompleted {
		// A completion at this run's place would have left only the crashes
		// counted after it, less those withdrawn since.
		fix.crashes = 0
		for _, e := range history[crashed+1:] {
			if e.Kind == leasestore.EventCrashed && !leasestore.LateRecorded(history, e.Worker, e.Token) {
				fix.crashes++
			}
		}
		if !started.IsZero() {
			fix.success = started.Add(out.Duration)
		}
	}
	return fix
}

// liftsQuarantine reports whether f lifts the job's quarantine, made by by
// at since: f withdraws a crash, leasectl made the quarantine at or after
// that crash, in its streak, and the crashes left are below the job's
// maxCrashes (docs/semantics.md, RecordLate, step 2).
func (f lateFix) liftsQuarantine(by string, since time.Time, maxCrashes int) bool {
	return f.withdrawn && by == leasestore.ByLeasectl && !since.Before(f.crashedAt) && f.crashes < maxCrashes
}

// resetsCrashes reports whether event e, recorded after the crash of the run
// with token, ends the streak that crash belongs to: a completed run after
// it, or an operator's release from quarantine.
func resetsCrashes(e leasestore.Event, token int64) bool {
	completed := outcomeOf(e) == leasestore.ResultCompleted
	switch e.Kind {
	case leasestore.EventReleased:
		return completed
	case leasestore.EventLateOutcome:
		return completed && e.Token > token
	case leasestore.EventUnquarantine:
		return e.Worker != leasestore.ByLeasectl
	}
	return false
}

// outcomeOf is the run's outcome that event e carries: its Result, or, on
// an event a leasectl older than Event.Result recorded, the first word of
// its detail, which every store wrote as the outcome's result
// (docs/semantics.md, History events); empty when e carries none (a
// crashed event of a run whose supervisor vanished).
func outcomeOf(e leasestore.Event) leasestore.Result {
	if e.Result != "" {
		return e.Result
	}
	switch e.Kind {
	case leasestore.EventReleased, leasestore.EventCrashed, leasestore.EventLateOutcome:
		word, _, _ := strings.Cut(e.Detail, " ")
		switch r := leasestore.Result(word); r {
		case leasestore.ResultCompleted, leasestore.ResultFailed, leasestore.ResultCrashed, leasestore.ResultNotStarted:
			return r
		}
	}
	return ""
}
