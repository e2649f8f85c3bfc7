package inspect

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// fakeStore is an in-memory leasestore.Driver with a hand-moved clock. It
// follows the store semantics closely enough for the reaper's logic
// (crashes consumed once, quarantine at the run's threshold, gauges), not
// the full conformance suite. Subscribe is not supported.
type fakeStore struct {
	mu   sync.Mutex
	now  time.Time
	jobs map[string]*fakeJob
	// fail, when set, is returned by every call.
	fail error
	// scans counts Scan calls.
	scans int
	// notices are the notices put, in the order of their first put.
	notices []leasestore.Notice
}

type fakeJob struct {
	evidence   *leasestore.Holder // the run's evidence; ExpiresAt is its liveness expiry
	maxCrashes int
	lastToken  int64
	attempts   int64
	crashes    int
	quarantine *leasestore.Quarantine
	history    []leasestore.Event
	// expect, lastSuccess and lastOutcome: expectations (Expect, Overdue).
	expect      *leasestore.Expectation
	lastSuccess time.Time
	lastOutcome *leasestore.LastOutcome
}

func newFakeStore(now time.Time) *fakeStore {
	return &fakeStore{now: now, jobs: map[string]*fakeJob{}}
}

func (s *fakeStore) advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = s.now.Add(d)
}

func (s *fakeStore) job(name string) *fakeJob {
	j := s.jobs[name]
	if j == nil {
		j = &fakeJob{}
		s.jobs[name] = j
	}
	return j
}

func (s *fakeStore) event(j *fakeJob, kind leasestore.EventKind, worker string, token int64, detail string) {
	j.history = append(j.history, leasestore.Event{At: s.now, Kind: kind, Worker: worker, Token: token, Detail: detail})
	if len(j.history) > leasestore.HistoryLimit {
		j.history = j.history[1:]
	}
}

func (s *fakeStore) live(j *fakeJob) bool {
	return j.evidence != nil && s.now.Before(j.evidence.ExpiresAt)
}

// consume counts the crash of j's evidence: the store's "consume a crash".
func (s *fakeStore) consume(name string, j *fakeJob) leasestore.Crash {
	ev := j.evidence
	j.evidence = nil
	j.crashes++
	s.event(j, leasestore.EventCrashed, ev.Worker, ev.Token, "supervisor vanished")
	c := leasestore.Crash{
		Job: name, Holder: ev.Worker, Host: ev.Host, PID: ev.PID, Token: ev.Token, Command: ev.Command,
		StartedAt: ev.StartedAt, StaleSince: ev.ExpiresAt, DetectedAt: s.now, Crashes: j.crashes,
	}
	if j.crashes >= j.maxCrashes {
		j.quarantine = &leasestore.Quarantine{
			Job: name, Crashes: j.crashes, Since: s.now, By: "leasectl",
			Reason: fmt.Sprintf("%d consecutive crashes", j.crashes), LastHolder: ev.Worker, LastHost: ev.Host,
		}
		s.event(j, leasestore.EventQuarantined, ev.Worker, ev.Token, j.quarantine.Reason)
		c.Quarantined = true
	}
	return c
}

func (s *fakeStore) Acquire(_ context.Context, req leasestore.AcquireRequest) (*leasestore.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	j := s.job(req.Job)
	if j.quarantine != nil {
		return nil, &leasestore.QuarantinedError{Quarantine: *j.quarantine}
	}
	if s.live(j) {
		return nil, &leasestore.HeldError{Job: req.Job, Holder: j.evidence.Worker, Token: j.evidence.Token}
	}
	var recovered *leasestore.Crash
	if j.evidence != nil {
		c := s.consume(req.Job, j)
		if c.Quarantined {
			return nil, &leasestore.QuarantinedError{Quarantine: *j.quarantine}
		}
		recovered = &c
	}
	j.lastToken++
	j.attempts++
	j.maxCrashes = req.MaxCrashes
	j.evidence = &leasestore.Holder{
		Job: req.Job, Worker: req.Holder, Host: req.Host, PID: req.PID, Token: j.lastToken, Attempt: j.attempts,
		Command: req.Command, StartedAt: s.now, ExpiresAt: s.now.Add(req.TTL),
	}
	s.event(j, leasestore.EventAcquired, req.Holder, j.lastToken, "")
	return &leasestore.Lease{Job: req.Job, Holder: req.Holder, Token: j.lastToken, Attempt: j.attempts, TTL: req.TTL, GrantedAt: s.now, Recovered: recovered}, nil
}

func (s *fakeStore) Renew(context.Context, *leasestore.Lease) error {
	return errors.New("fake store: Renew is not supported")
}

// Release ends l's run as completed (a success) or failed, whatever else
// out says.
func (s *fakeStore) Release(_ context.Context, l *leasestore.Lease, out leasestore.Outcome) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.job(l.Job)
	if j.evidence == nil || j.evidence.Token != l.Token {
		return leasestore.ErrLeaseLost
	}
	j.evidence = nil
	j.lastOutcome = &leasestore.LastOutcome{Outcome: out, Worker: l.Holder, Token: l.Token, FinishedAt: s.now}
	if out.Result == leasestore.ResultCompleted {
		j.crashes = 0
		j.lastSuccess = s.now
	}
	s.event(j, leasestore.EventReleased, l.Holder, l.Token, string(out.Result))
	return nil
}

func (s *fakeStore) Scan(context.Context) ([]leasestore.Crash, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scans++
	if s.fail != nil {
		return nil, s.fail
	}
	var out []leasestore.Crash
	for _, name := range s.names() {
		if j := s.jobs[name]; j.evidence != nil && !s.live(j) {
			out = append(out, s.consume(name, j))
		}
	}
	return out, nil
}

func (s *fakeStore) names() []string {
	names := make([]string, 0, len(s.jobs))
	for n := range s.jobs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (s *fakeStore) Quarantined(context.Context) ([]leasestore.Quarantine, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	var out []leasestore.Quarantine
	for _, name := range s.names() {
		if q := s.jobs[name].quarantine; q != nil {
			out = append(out, *q)
		}
	}
	return out, nil
}

func (s *fakeStore) Quarantine(_ context.Context, job string, note leasestore.Note) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	j := s.job(job)
	if j.quarantine == nil {
		j.quarantine = &leasestore.Quarantine{Job: job, Since: s.now}
	}
	j.quarantine.By, j.quarantine.Reason, j.quarantine.Crashes = note.By, note.Reason, j.crashes
	s.event(j, leasestore.EventQuarantined, "", 0, "by "+note.By+": "+note.Reason)
	return nil
}

func (s *fakeStore) Jobs(_ context.Context, prefix string, limit int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return leasestore.SelectJobs(slices.Collect(maps.Keys(s.jobs)), prefix, limit), s.fail
}

func (s *fakeStore) Stop(_ context.Context, job string, note leasestore.Note) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	j := s.job(job)
	if !s.live(j) {
		return leasestore.ErrNotRunning
	}
	stopping := *j.evidence
	stopping.Stop = &leasestore.StopRequest{By: note.By, Reason: note.Reason, At: s.now}
	j.evidence = &stopping
	s.event(j, leasestore.EventStop, note.By, stopping.Token, "by "+note.By+": "+note.Reason)
	return nil
}

func (s *fakeStore) Expect(_ context.Context, job string, x *leasestore.Expectation, _ leasestore.Note) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	j := s.job(job)
	j.expect = nil
	if x != nil {
		j.expect = &leasestore.Expectation{Every: x.Every, Grace: x.Grace, Since: s.now}
	}
	return nil
}

func (s *fakeStore) Overdue(context.Context) ([]leasestore.Overdue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	var out []leasestore.Overdue
	for _, name := range s.names() {
		j := s.jobs[name]
		if j.expect == nil {
			continue
		}
		if due := j.expect.Due(j.lastSuccess); s.now.After(due) {
			out = append(out, leasestore.Overdue{Job: name, Expect: *j.expect, LastSuccess: j.lastSuccess, Due: due, Now: s.now})
		}
	}
	return out, nil
}

func (s *fakeStore) ReleaseQuarantine(_ context.Context, job string, note leasestore.Note) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	j := s.job(job)
	if j.quarantine == nil {
		return leasestore.ErrNotQuarantined
	}
	j.quarantine = nil
	j.crashes = 0
	s.event(j, leasestore.EventUnquarantine, "", 0, "by "+note.By+": "+note.Reason)
	return nil
}

func (s *fakeStore) Status(_ context.Context, job string) (*leasestore.JobStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	st := &leasestore.JobStatus{Job: job, State: leasestore.StateIdle, Now: s.now}
	j := s.jobs[job]
	if j == nil {
		return st, nil
	}
	st.LastToken, st.Attempts, st.Crashes, st.MaxCrashes = j.lastToken, j.attempts, j.crashes, j.maxCrashes
	st.Expect, st.LastSuccess, st.LastOutcome = j.expect, j.lastSuccess, j.lastOutcome
	st.History = append([]leasestore.Event(nil), j.history...)
	switch {
	case j.quarantine != nil:
		st.State = leasestore.StateQuarantined
		q := *j.quarantine
		st.Quarantine = &q
	case s.live(j):
		st.State = leasestore.StateRunning
		h := *j.evidence
		st.Holder = &h
	case j.evidence != nil:
		st.State = leasestore.StateCrashed
		st.Crashed = &leasestore.Crash{Job: job, Holder: j.evidence.Worker, Token: j.evidence.Token, StaleSince: j.evidence.ExpiresAt}
	}
	return st, nil
}

func (s *fakeStore) Leases(context.Context) ([]leasestore.Holder, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	var out []leasestore.Holder
	for _, name := range s.names() {
		if j := s.jobs[name]; s.live(j) {
			out = append(out, *j.evidence)
		}
	}
	return out, nil
}

func (s *fakeStore) Counts(context.Context) (leasestore.Counts, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return leasestore.Counts{}, s.fail
	}
	var c leasestore.Counts
	for _, j := range s.jobs {
		if s.live(j) {
			c.InFlight++
		}
		if j.quarantine != nil {
			c.Quarantined++
		}
	}
	return c, nil
}

func (s *fakeStore) CheckToken(_ context.Context, job string, token int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	j := s.job(job)
	live := s.live(j)
	if token == j.lastToken && live {
		return nil
	}
	return &leasestore.StaleTokenError{Job: job, Token: token, Current: j.lastToken, Live: live}
}

func (s *fakeStore) Subscribe(context.Context, string, string) (leasestore.Subscription, error) {
	return nil, errors.New("fake store: Subscribe is not supported")
}

// Limits are one slot and every TTL: the fake keeps one run per job.
func (s *fakeStore) Limits() leasestore.Limits { return leasestore.Limits{MaxSlots: 1} }

func (s *fakeStore) Leave(context.Context, string, string) error {
	return errors.New("fake store: Leave is not supported")
}

func (s *fakeStore) RecordLate(context.Context, leasestore.LateOutcome) (leasestore.Correction, error) {
	return leasestore.Correction{}, errors.New("fake store: RecordLate is not supported")
}

func (s *fakeStore) StartTokens(context.Context, *leasestore.TokenHub) (leasestore.TokenSource, error) {
	return nil, errors.New("fake store: the token feed is not supported")
}

func (s *fakeStore) PutNotices(_ context.Context, notices []leasestore.Notice) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	for _, n := range notices {
		if !slices.ContainsFunc(s.notices, func(k leasestore.Notice) bool { return k.Key == n.Key }) {
			s.notices = append(s.notices, n)
		}
	}
	return nil
}

func (s *fakeStore) ListNotices(context.Context) ([]leasestore.Notice, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.notices), s.fail
}

func (s *fakeStore) ClaimNotices(context.Context, string, int, time.Duration) ([]leasestore.Notice, error) {
	return nil, errors.New("fake store: ClaimNotices is not supported")
}

func (s *fakeStore) SettleNotice(context.Context, string, string, leasestore.Settlement) error {
	return errors.New("fake store: SettleNotice is not supported")
}

func (s *fakeStore) Close() error { return nil }

var _ leasestore.Driver = (*fakeStore)(nil)
