package rules

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Acquire grants a lease on r's job to req.Holder at now, in a free slot, or
// refuses it, in the order leasestore.Leaser.Acquire documents: a holder
// that gave up on its grant, then the holder's own live lease (given back,
// renewed), quarantine, region, the crashes of runs whose supervisor
// vanished (counted, and refusing if one quarantined the job), another
// number of slots than the runs in flight, a job whose slots are all held
// or promised to earlier waiters (a waiting request joins the queue),
// deadline, minimum interval. A refusal may still have changed r (a crash
// counted, the queue). A refusal other than *HeldError takes the holder
// out of the queue: it will not wait for this job, and while a slot is
// free the waiters behind it are woken, as when a waiter leaves.
func Acquire(r *Record, req leasestore.AcquireRequest, now time.Time) (Step, *leasestore.Lease, error) {
	var s Step
	lease, err := r.acquire(&s, req, now)
	if err != nil && !errors.As(err, new(*leasestore.HeldError)) {
		r.leave(&s, req.Holder, now)
	}
	return s, lease, err
}

func (r *Record) acquire(s *Step, req leasestore.AcquireRequest, now time.Time) (*leasestore.Lease, error) {
	if r.Abandoned != "" && r.Abandoned == req.Holder {
		return nil, fmt.Errorf("acquire job %q: worker %s gave up on it: %w", req.Job, req.Holder, leasestore.ErrLeaseLost)
	}
	for _, u := range r.Runs {
		if u.Live(now) && u.Holder == req.Holder {
			// Asked again by its holder, whose first answer was lost: the
			// same lease, renewed, as the first answer would have given it.
			r.extend(u, now, req.TTL)
			return &leasestore.Lease{Job: req.Job, Holder: u.Holder, Token: u.Token, Attempt: u.Attempt, Slot: u.Slot,
				TTL: req.TTL, GrantedAt: now}, nil
		}
	}
	if r.Quarantine != nil {
		return nil, &leasestore.QuarantinedError{Quarantine: *r.Quarantine}
	}
	if req.Region != "" && r.Region != "" && req.Region != r.Region {
		return nil, &leasestore.RegionError{Job: req.Job, Region: r.Region, Requested: req.Region}
	}
	var recovered *leasestore.Crash
	for u := r.crashedRun(now); u != nil; u = r.crashedRun(now) {
		c := r.countCrash(s, now, u, "", staleDetail("acquire"))
		if recovered == nil {
			recovered = c
		}
		if c.Quarantined {
			return nil, &leasestore.QuarantinedError{Quarantine: *r.Quarantine}
		}
	}
	slots := max(req.Slots, 1)
	live := r.LiveRuns(now)
	if len(live) > 0 && slots != r.slots() {
		return nil, &leasestore.SlotsError{Job: req.Job, Slots: r.slots(), Requested: slots}
	}
	r.prune(now)
	if free := slots - len(live); free <= r.ahead(req.Holder) {
		return nil, r.held(req, live, now)
	}
	if !req.Deadline.IsZero() && now.After(req.Deadline) {
		return nil, &leasestore.DeadlineError{Job: req.Job, Deadline: req.Deadline, Now: now}
	}
	if req.MinInterval > 0 && !r.LastSuccess.IsZero() {
		if age := now.Sub(r.LastSuccess); age < req.MinInterval {
			return nil, &leasestore.TooSoonError{Job: req.Job, LastSuccess: r.LastSuccess, MinInterval: req.MinInterval, Age: age}
		}
	}
	token := max(r.LastToken+1, now.UnixMicro())
	r.Attempts++
	u := &Run{
		Holder: req.Holder, Token: token, Slot: freeSlot(live), Host: req.Host, PID: req.PID, Command: req.Command,
		Started: now, Attempt: r.Attempts, TTL: req.TTL, EvidenceTTL: req.EvidenceTTL,
		MaxCrashes: req.MaxCrashes, LiveUntil: expiry(now, req.TTL), EvidenceUntil: expiry(now, req.EvidenceTTL),
	}
	// The runs left are the live ones: this also drops a run whose evidence
	// expired unseen.
	r.Runs = append(live, u)
	slices.SortFunc(r.Runs, func(a, b *Run) int { return a.Slot - b.Slot })
	r.unqueue(req.Holder)
	r.Slots = 0
	if slots > 1 {
		r.Slots = slots
	}
	r.LastToken = token
	r.MaxCrashes = req.MaxCrashes
	r.LastHolder = req.Holder
	r.LastHost = req.Host
	if r.Region == "" {
		r.Region = req.Region
	}
	r.setExpect(req.Expect, now)
	detail := fmt.Sprintf("attempt %d", r.Attempts)
	if slots > 1 {
		detail += fmt.Sprintf(", slot %d of %d", u.Slot, slots)
	}
	s.record(now, leasestore.Event{Kind: leasestore.EventAcquired, Worker: req.Holder, Token: token, Detail: detail})
	s.Tokens = true
	return &leasestore.Lease{Job: req.Job, Holder: req.Holder, Token: token, Attempt: r.Attempts, Slot: u.Slot,
		TTL: req.TTL, GrantedAt: now, Recovered: recovered}, nil
}

// held is the refusal of req at now for a job whose free slots, if any, go
// to earlier waiters; live are its live runs. A request that waits joins
// the queue, or keeps its place in it.
func (r *Record) held(req leasestore.AcquireRequest, live []*Run, now time.Time) *leasestore.HeldError {
	err := &leasestore.HeldError{Job: req.Job, Slots: r.slots()}
	if req.Wait {
		err.Position = r.wait(req, now)
	}
	err.Waiting = len(r.Queue)
	if len(live) < max(req.Slots, 1) {
		return err // a slot is free, but promised to earlier waiters
	}
	first := slices.MinFunc(live, func(a, b *Run) int { return a.LiveUntil.Compare(b.LiveUntil) })
	err.Holder, err.Host, err.PID, err.Token = first.Holder, first.Host, first.PID, first.Token
	err.Since, err.ExpiresIn = first.Started, first.LiveUntil.Sub(now)
	return err
}

// freeSlot is the lowest slot none of the live runs is in.
func freeSlot(live []*Run) int {
	for slot := 0; ; slot++ {
		if !slices.ContainsFunc(live, func(u *Run) bool { return u.Slot == slot }) {
			return slot
		}
	}
}

// extend moves the liveness of the job's run u to now+ttl and its evidence
// to now+its own TTL, and returns the renewed run.
func (r *Record) extend(u *Run, now time.Time, ttl time.Duration) *Run {
	renewed := *u
	renewed.LiveUntil = expiry(now, ttl)
	renewed.EvidenceUntil = expiry(now, renewed.EvidenceTTL)
	r.replace(u, &renewed)
	return &renewed
}

// Renew extends l's liveness by l.TTL and its run's evidence by its own TTL
// at now, keeps the round trip l reports, and sets l.Stop when an operator
// asked the run to stop. It refuses with ErrLeaseLost a lease that is no
// longer live; when the run's own evidence (l's token and holder) is still
// there, a lease-lost event records the late renewal.
func Renew(r *Record, l *leasestore.Lease, now time.Time) (Step, error) {
	var s Step
	u := r.runOf(l.Holder, l.Token, now)
	if u != nil && u.Live(now) {
		renewed := r.extend(u, now, l.TTL)
		if l.RTT > 0 {
			renewed.RTT = l.RTT
		}
		l.Stop = u.Stop
		return s, nil
	}
	if u != nil {
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
	u := r.runOf("", l.Token, now)
	if u == nil {
		return s, fmt.Errorf("release job %q token %d: %w", l.Job, l.Token, leasestore.ErrLeaseLost)
	}
	r.end(&s, now, u, out)
	return s, nil
}

// end ends the job's run u, whose evidence is there, with outcome out.
func (r *Record) end(s *Step, now time.Time, u *Run, out leasestore.Outcome) {
	r.LastOutcome = &leasestore.LastOutcome{Outcome: out, Worker: u.Holder, Token: u.Token, FinishedAt: now}
	if out.Result == leasestore.ResultCrashed {
		r.countCrash(s, now, u, out.Result, out.Detail())
		return
	}
	if out.Result == leasestore.ResultCompleted {
		r.Crashes = 0
		r.LastSuccess = now
	}
	s.record(now, leasestore.Event{Kind: leasestore.EventReleased, Worker: u.Holder, Token: u.Token,
		Result: out.Result, Detail: out.Detail()})
	r.drop(u)
	s.Wake, s.Tokens = true, true
}

// Stop asks the job's live runs to stop at now, by note's operator: each
// holder learns it from its next renewal. A second request replaces the
// first's note. It refuses with ErrNotRunning a job without a live run.
func Stop(r *Record, note leasestore.Note, now time.Time) (Step, error) {
	var s Step
	live := r.LiveRuns(now)
	if len(live) == 0 {
		return s, fmt.Errorf("stop job %q: %w", r.Job, leasestore.ErrNotRunning)
	}
	for _, u := range live {
		stopping := *u
		stopping.Stop = &leasestore.StopRequest{By: note.By, Reason: note.Reason, At: now}
		r.replace(u, &stopping)
		s.record(now, leasestore.Event{Kind: leasestore.EventStop, Worker: note.By, Token: stopping.Token,
			Detail: noteDetail(note)})
	}
	return s, nil
}

// CheckToken returns nil when token is a current fencing token of the job
// at now, and a *StaleTokenError otherwise. Of a job of one slot, the
// current token is the last one granted, while its lease is live; of a job
// of several, every live run's token is current.
func CheckToken(r *Record, token int64, now time.Time) error {
	mine := slices.ContainsFunc(r.LiveRuns(now), func(u *Run) bool { return u.Token == token })
	if mine && (token == r.LastToken || r.slots() > 1) {
		return nil
	}
	return &leasestore.StaleTokenError{Job: r.Job, Token: token, Current: r.LastToken, Live: r.LastLive(now)}
}
