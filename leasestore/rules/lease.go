package rules

import (
	"fmt"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Acquire grants the lease on r's job to req.Holder at now, or refuses it,
// in the order leasestore.Leaser.Acquire documents: a holder that gave up
// on its grant, then the holder's own live lease (given back, renewed),
// quarantine, region, a live lease of another, the previous run's crash
// (counted, and refusing if it quarantined the job), deadline, minimum
// interval. A refusal may still have changed r (a crash counted).
func Acquire(r *Record, req leasestore.AcquireRequest, now time.Time) (Step, *leasestore.Lease, error) {
	var s Step
	if r.Abandoned != "" && r.Abandoned == req.Holder {
		return s, nil, fmt.Errorf("acquire job %q: worker %s gave up on it: %w", req.Job, req.Holder, leasestore.ErrLeaseLost)
	}
	if r.Live(now) && r.Run.Holder == req.Holder {
		// Asked again by its holder, whose first answer was lost: the same
		// lease, renewed, as the first answer would have given it.
		u := r.Run
		r.extend(now, req.TTL)
		return s, &leasestore.Lease{Job: req.Job, Holder: u.Holder, Token: u.Token, Attempt: u.Attempt,
			TTL: req.TTL, GrantedAt: now}, nil
	}
	if r.Quarantine != nil {
		return s, nil, &leasestore.QuarantinedError{Quarantine: *r.Quarantine}
	}
	if req.Region != "" && r.Region != "" && req.Region != r.Region {
		return s, nil, &leasestore.RegionError{Job: req.Job, Region: r.Region, Requested: req.Region}
	}
	if r.Live(now) {
		u := r.Run
		return s, nil, &leasestore.HeldError{Job: req.Job, Holder: u.Holder, Host: u.Host, PID: u.PID, Token: u.Token,
			Since: u.Started, ExpiresIn: u.LiveUntil.Sub(now)}
	}
	var recovered *leasestore.Crash
	if r.Crashed(now) {
		recovered = r.countCrash(&s, now, "", staleDetail("acquire"))
		if recovered.Quarantined {
			return s, nil, &leasestore.QuarantinedError{Quarantine: *r.Quarantine}
		}
	}
	if !req.Deadline.IsZero() && now.After(req.Deadline) {
		return s, nil, &leasestore.DeadlineError{Job: req.Job, Deadline: req.Deadline, Now: now}
	}
	if req.MinInterval > 0 && !r.LastSuccess.IsZero() {
		if age := now.Sub(r.LastSuccess); age < req.MinInterval {
			return s, nil, &leasestore.TooSoonError{Job: req.Job, LastSuccess: r.LastSuccess, MinInterval: req.MinInterval, Age: age}
		}
	}
	token := max(r.LastToken+1, now.UnixMicro())
	r.Attempts++
	// This also drops a previous run whose evidence expired unseen.
	r.Run = &Run{
		Holder: req.Holder, Token: token, Host: req.Host, PID: req.PID, Command: req.Command,
		Started: now, Attempt: r.Attempts, TTL: req.TTL, EvidenceTTL: req.EvidenceTTL,
		MaxCrashes: req.MaxCrashes, LiveUntil: expiry(now, req.TTL), EvidenceUntil: expiry(now, req.EvidenceTTL),
	}
	r.LastToken = token
	r.MaxCrashes = req.MaxCrashes
	r.LastHolder = req.Holder
	r.LastHost = req.Host
	if r.Region == "" {
		r.Region = req.Region
	}
	r.setExpect(req.Expect, now)
	s.record(now, leasestore.Event{Kind: leasestore.EventAcquired, Worker: req.Holder, Token: token,
		Detail: fmt.Sprintf("attempt %d", r.Attempts)})
	s.Tokens = true
	return s, &leasestore.Lease{Job: req.Job, Holder: req.Holder, Token: token, Attempt: r.Attempts,
		TTL: req.TTL, GrantedAt: now, Recovered: recovered}, nil
}

// extend moves the liveness of the job's run to now+ttl and its evidence to
// now+its own TTL.
func (r *Record) extend(now time.Time, ttl time.Duration) {
	renewed := *r.Run
	renewed.LiveUntil = expiry(now, ttl)
	renewed.EvidenceUntil = expiry(now, renewed.EvidenceTTL)
	r.Run = &renewed
}

// Renew extends l's liveness by l.TTL and its run's evidence by its own TTL
// at now, keeps the round trip l reports, and sets l.Stop when an operator
// asked the run to stop. It refuses with ErrLeaseLost a lease that is no
// longer live; when the run's own evidence (l's token and holder) is still
// there, a lease-lost event records the late renewal.
func Renew(r *Record, l *leasestore.Lease, now time.Time) (Step, error) {
	var s Step
	u := r.Run
	if r.Live(now) && u.Holder == l.Holder && u.Token == l.Token {
		r.extend(now, l.TTL)
		if l.RTT > 0 {
			r.Run.RTT = l.RTT
		}
		l.Stop = u.Stop
		return s, nil
	}
	if r.Evidence(now) && u.Token == l.Token && u.Holder == l.Holder {
		s.record(now, leasestore.Event{Kind: leasestore.EventLeaseLost, Worker: l.Holder, Token: l.Token,
			Detail: "renewal came after the lease expired"})
	}
	return s, fmt.Errorf("renew job %q token %d: %w", l.Job, l.Token, leasestore.ErrLeaseLost)
}

// Release ends l's run with outcome out at now. It succeeds while the run's
// evidence is there, even after its liveness expired (the supervisor saw
// the run end: no crash), and refuses with ErrLeaseLost otherwise.
func Release(r *Record, l *leasestore.Lease, out leasestore.Outcome, now time.Time) (Step, error) {
	var s Step
	if !r.Evidence(now) || r.Run.Token != l.Token {
		return s, fmt.Errorf("release job %q token %d: %w", l.Job, l.Token, leasestore.ErrLeaseLost)
	}
	r.end(&s, now, out)
	return s, nil
}

// end ends the job's run, whose evidence is there, with outcome out.
func (r *Record) end(s *Step, now time.Time, out leasestore.Outcome) {
	u := r.Run
	r.LastOutcome = &leasestore.LastOutcome{Outcome: out, Worker: u.Holder, Token: u.Token, FinishedAt: now}
	if out.Result == leasestore.ResultCrashed {
		r.countCrash(s, now, out.Result, out.Detail())
		return
	}
	if out.Result == leasestore.ResultCompleted {
		r.Crashes = 0
		r.LastSuccess = now
	}
	s.record(now, leasestore.Event{Kind: leasestore.EventReleased, Worker: u.Holder, Token: u.Token,
		Result: out.Result, Detail: out.Detail()})
	r.Run = nil
	s.Wake, s.Tokens = true, true
}

// Stop asks the job's live run to stop at now, by note's operator: its
// holder learns it from its next renewal. A second request replaces the
// first's note. It refuses with ErrNotRunning a job without a live run.
func Stop(r *Record, note leasestore.Note, now time.Time) (Step, error) {
	var s Step
	if !r.Live(now) {
		return s, fmt.Errorf("stop job %q: %w", r.Job, leasestore.ErrNotRunning)
	}
	stopping := *r.Run
	stopping.Stop = &leasestore.StopRequest{By: note.By, Reason: note.Reason, At: now}
	r.Run = &stopping
	s.record(now, leasestore.Event{Kind: leasestore.EventStop, Worker: note.By, Token: stopping.Token,
		Detail: noteDetail(note)})
	return s, nil
}

// CheckToken returns nil when token is the job's current fencing token and
// its lease is live at now, and a *StaleTokenError otherwise.
func CheckToken(r *Record, token int64, now time.Time) error {
	live := r.Live(now) && r.Run.Token == r.LastToken
	if token == r.LastToken && live {
		return nil
	}
	return &leasestore.StaleTokenError{Job: r.Job, Token: token, Current: r.LastToken, Live: live}
}
