package api

import (
	"fmt"
	"strings"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Defaults of an acquire that leaves them out: those of `leasectl run`.
const (
	DefaultTTL         = 30 * time.Second
	DefaultEvidenceTTL = time.Hour
	DefaultMaxCrashes  = 3
)

// Bounds on what a request may carry. MaxTextLen bounds a reason or a
// result: they end up in the job's history, twenty events of which every
// job keeps.
const (
	MaxTextLen     = 1024
	MaxWorkerIDLen = 200
	MaxHostLen     = 255
)

// MS is d in whole milliseconds, rounded up, so that a positive duration
// never becomes zero and a TTL never shrinks.
func MS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Duration is ms milliseconds.
func Duration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// text checks free text of at most limit bytes without NUL or other
// control bytes but tab; required refuses it empty.
func text(field, s string, limit int, required bool) error {
	switch {
	case required && s == "":
		return &FieldError{Field: field, Reason: "it is required"}
	case len(s) > limit:
		return &FieldError{Field: field, Reason: fmt.Sprintf("it is %d bytes long, the limit is %d", len(s), limit)}
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }):
		return &FieldError{Field: field, Reason: "it holds a control character"}
	}
	return nil
}

// job checks a job_id field.
func job(id string) error {
	if err := leasestore.ValidateJobID(id); err != nil {
		return &FieldError{Field: "job_id", Reason: err.Error()}
	}
	return nil
}

// positive checks a count of milliseconds, or a token, that must be above
// zero (when given, unless required).
func positive(field string, v int64, required bool) error {
	if v < 0 || required && v == 0 {
		return &FieldError{Field: field, Reason: "it must be a positive number"}
	}
	return nil
}

// firstError returns the first non-nil error.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// FromAcquireRequest is req on the wire.
func FromAcquireRequest(req leasestore.AcquireRequest) AcquireRequest {
	a := AcquireRequest{
		JobID: req.Job, WorkerID: req.Holder, Region: req.Region, Host: req.Host, PID: req.PID, Command: req.Command,
		TTLMS: MS(req.TTL), EvidenceTTLMS: MS(req.EvidenceTTL), MaxCrashes: req.MaxCrashes, MinIntervalMS: MS(req.MinInterval),
		Slots: req.Slots, Wait: req.Wait,
	}
	if !req.Deadline.IsZero() {
		d := req.Deadline.UTC()
		a.TTLDeadline = &d
	}
	a.Expect = FromExpectation(req.Expect)
	return a
}

// ToStore validates a, fills in the defaults, and returns it as the
// store's request. A *FieldError names the first field at fault.
func (a *AcquireRequest) ToStore() (leasestore.AcquireRequest, error) {
	err := firstError(
		job(a.JobID),
		text("worker_id", a.WorkerID, MaxWorkerIDLen, true),
		text("host", a.Host, MaxHostLen, false),
		positive("ttl_ms", a.TTLMS, false),
		positive("evidence_ttl_ms", a.EvidenceTTLMS, false),
		positive("min_interval_ms", a.MinIntervalMS, false),
	)
	if err != nil {
		return leasestore.AcquireRequest{}, err
	}
	if a.Region != "" {
		if err := leasestore.ValidateRegion(a.Region); err != nil {
			return leasestore.AcquireRequest{}, &FieldError{Field: "region", Reason: err.Error()}
		}
	}
	if a.PID < 0 {
		return leasestore.AcquireRequest{}, &FieldError{Field: "pid", Reason: "it must not be negative"}
	}
	if a.Slots < 0 || a.Slots > leasestore.MaxSlots {
		return leasestore.AcquireRequest{}, &FieldError{Field: "slots", Reason: fmt.Sprintf("it must be between 1 and %d", leasestore.MaxSlots)}
	}
	for _, arg := range a.Command {
		if strings.ContainsRune(arg, 0) {
			return leasestore.AcquireRequest{}, &FieldError{Field: "command", Reason: "an argument holds a NUL byte"}
		}
	}
	req := leasestore.AcquireRequest{
		Job: a.JobID, Holder: a.WorkerID, Host: a.Host, PID: a.PID, Command: a.Command, Region: a.Region,
		TTL: Duration(a.TTLMS), EvidenceTTL: Duration(a.EvidenceTTLMS), MaxCrashes: a.MaxCrashes,
		MinInterval: Duration(a.MinIntervalMS), Slots: a.Slots, Wait: a.Wait,
	}
	if req.Expect, err = a.Expect.ToStore(); err != nil {
		return leasestore.AcquireRequest{}, err
	}
	if req.TTL == 0 {
		req.TTL = DefaultTTL
	}
	switch {
	case req.EvidenceTTL == 0:
		req.EvidenceTTL = max(DefaultEvidenceTTL, 2*req.TTL)
	case req.EvidenceTTL <= req.TTL:
		return leasestore.AcquireRequest{}, &FieldError{Field: "evidence_ttl_ms",
			Reason: "it must exceed ttl_ms: a crash's evidence outlives its lease, so that a reaper sees it"}
	}
	switch {
	case req.MaxCrashes == 0:
		req.MaxCrashes = DefaultMaxCrashes
	case req.MaxCrashes < 2:
		return leasestore.AcquireRequest{}, &FieldError{Field: "max_crashes", Reason: "it must be at least 2"}
	}
	if a.TTLDeadline != nil {
		req.Deadline = *a.TTLDeadline
	}
	return req, nil
}

// Validate checks a leave request and returns its job and worker.
func (a *LeaveRequest) Validate() (string, string, error) {
	err := firstError(job(a.JobID), text("worker_id", a.WorkerID, MaxWorkerIDLen, true))
	return a.JobID, a.WorkerID, err
}

// FromLease is the answer to an acquire of req that l granted.
func FromLease(l *leasestore.Lease, req leasestore.AcquireRequest) Lease {
	a := Lease{
		JobID: l.Job, WorkerID: l.Holder, FencingToken: l.Token, Attempt: l.Attempt, Slot: l.Slot, TTLMS: MS(l.TTL),
		GrantedAt: l.GrantedAt.UTC(), LeaseExpiry: l.GrantedAt.Add(l.TTL).UTC(), Region: req.Region,
	}
	if !req.Deadline.IsZero() {
		d := req.Deadline.UTC()
		a.TTLDeadline = &d
	}
	if l.Recovered != nil {
		c := FromCrash(*l.Recovered)
		a.Recovered = &c
	}
	return a
}

// ToStore is the lease a granted, as asked for by req: its TTL is the
// request's own, not the wire's rounded one.
func (a *Lease) ToStore(req leasestore.AcquireRequest) *leasestore.Lease {
	l := &leasestore.Lease{Job: a.JobID, Holder: a.WorkerID, Token: a.FencingToken, Attempt: a.Attempt, Slot: a.Slot,
		TTL: req.TTL, GrantedAt: a.GrantedAt}
	if a.Recovered != nil {
		c := a.Recovered.ToStore()
		l.Recovered = &c
	}
	return l
}

// Validate checks a heartbeat and returns the lease it renews.
func (h *HeartbeatRequest) Validate() (*leasestore.Lease, error) {
	err := firstError(
		job(h.JobID),
		text("worker_id", h.WorkerID, MaxWorkerIDLen, true),
		positive("fencing_token", h.FencingToken, true),
		positive("ttl_ms", h.TTLMS, true),
		positive("rtt_us", h.RTTUS, false),
	)
	if err != nil {
		return nil, err
	}
	return &leasestore.Lease{Job: h.JobID, Holder: h.WorkerID, Token: h.FencingToken, TTL: Duration(h.TTLMS),
		RTT: time.Duration(h.RTTUS) * time.Microsecond}, nil
}

// FromRenew is the wire form of renewing l: its TTL in whole milliseconds
// (rounded up) and its round trip in whole microseconds, as the stores
// that keep it keep it.
func FromRenew(l *leasestore.Lease) HeartbeatRequest {
	return HeartbeatRequest{JobID: l.Job, WorkerID: l.Holder, FencingToken: l.Token, TTLMS: MS(l.TTL),
		RTTUS: max(l.RTT.Microseconds(), 0)}
}

// Validate checks a completion and returns the lease it ends and the
// outcome: completed, exit 0, the result as the reason.
func (c *CompleteRequest) Validate() (*leasestore.Lease, leasestore.Outcome, error) {
	err := firstError(
		job(c.JobID),
		text("worker_id", c.WorkerID, MaxWorkerIDLen, true),
		positive("fencing_token", c.FencingToken, true),
		positive("duration_ms", c.DurationMS, false),
		text("result", c.Result, MaxTextLen, false),
	)
	if err != nil {
		return nil, leasestore.Outcome{}, err
	}
	return &leasestore.Lease{Job: c.JobID, Holder: c.WorkerID, Token: c.FencingToken},
		leasestore.Outcome{Result: leasestore.ResultCompleted, Duration: Duration(c.DurationMS), Reason: c.Result}, nil
}

// FromRelease is the wire form of releasing l with out.
func FromRelease(l *leasestore.Lease, out leasestore.Outcome) ReleaseRequest {
	return ReleaseRequest{JobID: l.Job, WorkerID: l.Holder, FencingToken: l.Token, Result: string(out.Result),
		ExitCode: out.ExitCode, Signal: out.Signal, DurationMS: MS(out.Duration), Reason: out.Reason}
}

// Validate checks a release and returns the lease it ends and the outcome.
func (r *ReleaseRequest) Validate() (*leasestore.Lease, leasestore.Outcome, error) {
	err := firstError(
		job(r.JobID),
		text("worker_id", r.WorkerID, MaxWorkerIDLen, true),
		positive("fencing_token", r.FencingToken, true),
		positive("duration_ms", r.DurationMS, false),
		text("reason", r.Reason, MaxTextLen, false),
	)
	if err != nil {
		return nil, leasestore.Outcome{}, err
	}
	result := leasestore.Result(r.Result)
	switch result {
	case "":
		result = leasestore.ResultFailed
	case leasestore.ResultCompleted, leasestore.ResultFailed, leasestore.ResultCrashed, leasestore.ResultNotStarted:
	default:
		return nil, leasestore.Outcome{}, &FieldError{Field: "result", Reason: "use completed, failed, crashed or not-started"}
	}
	if r.Signal < 0 {
		return nil, leasestore.Outcome{}, &FieldError{Field: "signal", Reason: "it must not be negative"}
	}
	return &leasestore.Lease{Job: r.JobID, Holder: r.WorkerID, Token: r.FencingToken},
		leasestore.Outcome{Result: result, ExitCode: r.ExitCode, Signal: r.Signal, Duration: Duration(r.DurationMS), Reason: r.Reason}, nil
}

// FromLateOutcome is the wire form of late.
func FromLateOutcome(late leasestore.LateOutcome) RecordLateRequest {
	return RecordLateRequest{JobID: late.Job, WorkerID: late.Holder, FencingToken: late.Token, Result: string(late.Result),
		ExitCode: late.ExitCode, Signal: late.Signal, DurationMS: MS(late.Duration), Reason: late.Reason}
}

// Validate checks a late outcome and returns it as the store takes it.
func (r *RecordLateRequest) Validate() (leasestore.LateOutcome, error) {
	rel := ReleaseRequest{JobID: r.JobID, WorkerID: r.WorkerID, FencingToken: r.FencingToken, Result: r.Result,
		ExitCode: r.ExitCode, Signal: r.Signal, DurationMS: r.DurationMS, Reason: r.Reason}
	if rel.FencingToken == 0 {
		rel.FencingToken = 1 // a token is optional here, unlike in a release
	}
	if err := positive("fencing_token", r.FencingToken, false); err != nil {
		return leasestore.LateOutcome{}, err
	}
	_, out, err := rel.Validate()
	if err != nil {
		return leasestore.LateOutcome{}, err
	}
	return leasestore.LateOutcome{Job: r.JobID, Holder: r.WorkerID, Token: r.FencingToken, Outcome: out}, nil
}

// FromCorrection is c on the wire.
func FromCorrection(c leasestore.Correction) Correction {
	return Correction{Released: c.Released, CrashWithdrawn: c.CrashWithdrawn, QuarantineLifted: c.QuarantineLifted, Crashes: c.Crashes}
}

// ToStore is the correction c describes.
func (c *Correction) ToStore() leasestore.Correction {
	return leasestore.Correction{Released: c.Released, CrashWithdrawn: c.CrashWithdrawn, QuarantineLifted: c.QuarantineLifted, Crashes: c.Crashes}
}

// Validate checks an operator's request on a job (quarantine, its release,
// stop) and returns its job and note. The operator may not sign as
// leasectl: the rules tell leasectl's own quarantines and releases by that
// name.
func (n *NoteRequest) Validate() (string, leasestore.Note, error) {
	err := firstError(
		job(n.JobID),
		text("by", n.By, MaxWorkerIDLen, true),
		notLeasectl(n.By),
		text("reason", n.Reason, MaxTextLen, false),
	)
	return n.JobID, leasestore.Note{By: n.By, Reason: n.Reason}, err
}

// notLeasectl refuses an operator's name that is leasectl's own.
func notLeasectl(by string) error {
	if by == leasestore.ByLeasectl {
		return &FieldError{Field: "by", Reason: fmt.Sprintf("%q is the name leasectl records its own actions under", by)}
	}
	return nil
}

// Validate checks a subscribe request and returns its job.
func (s *SubscribeRequest) Validate() (string, error) {
	return s.JobID, firstError(job(s.JobID), text("worker_id", s.WorkerID, MaxWorkerIDLen, false))
}

// Validate checks a token watch request and returns its job.
func (w *TokenWatchRequest) Validate() (string, error) {
	return w.JobID, job(w.JobID)
}

// maxWatchIDLen bounds a watch ID in a sync request; the registry's are 24
// characters.
const maxWatchIDLen = 64

// Validate checks a token sync request.
func (s *TokenSyncRequest) Validate() error {
	if len(s.WatchIDs) > MaxTokenSyncWatches {
		return &FieldError{Field: "watch_ids", Reason: fmt.Sprintf("%d watches, the limit is %d", len(s.WatchIDs), MaxTokenSyncWatches)}
	}
	for _, id := range s.WatchIDs {
		if err := text("watch_ids", id, maxWatchIDLen, true); err != nil {
			return err
		}
	}
	return nil
}

// FromTokenState is st on the wire, numbered seq.
func FromTokenState(seq int64, st leasestore.TokenState) TokenState {
	return TokenState{Seq: seq, FencingToken: st.Token, Live: st.Live, Read: st.Read, Lost: st.Lost}
}

// ToStore is the state t describes, of job.
func (t *TokenState) ToStore(job string) leasestore.TokenState {
	return leasestore.TokenState{Job: job, Token: t.FencingToken, Live: t.Live, Read: t.Read, Lost: t.Lost}
}

// FromCrash is c on the wire.
func FromCrash(c leasestore.Crash) Crash {
	return Crash{JobID: c.Job, WorkerID: c.Holder, Host: c.Host, PID: c.PID, FencingToken: c.Token, Command: c.Command,
		StartedAt: c.StartedAt.UTC(), StaleSince: c.StaleSince.UTC(), DetectedAt: c.DetectedAt.UTC(),
		Crashes: c.Crashes, Quarantined: c.Quarantined}
}

// ToStore is the crash c describes.
func (c *Crash) ToStore() leasestore.Crash {
	return leasestore.Crash{Job: c.JobID, Holder: c.WorkerID, Host: c.Host, PID: c.PID, Token: c.FencingToken,
		Command: c.Command, StartedAt: c.StartedAt, StaleSince: c.StaleSince, DetectedAt: c.DetectedAt,
		Crashes: c.Crashes, Quarantined: c.Quarantined}
}

// FromCrashes is crashes on the wire, [] when none.
func FromCrashes(crashes []leasestore.Crash) []Crash {
	out := make([]Crash, 0, len(crashes))
	for _, c := range crashes {
		out = append(out, FromCrash(c))
	}
	return out
}

// FromQuarantine is q on the wire.
func FromQuarantine(q leasestore.Quarantine) Quarantine {
	return Quarantine{JobID: q.Job, Crashes: q.Crashes, Since: q.Since.UTC(), Reason: q.Reason, By: q.By,
		LastWorker: q.LastHolder, LastHost: q.LastHost}
}

// ToStore is the quarantine q describes.
func (q *Quarantine) ToStore() leasestore.Quarantine {
	return leasestore.Quarantine{Job: q.JobID, Crashes: q.Crashes, Since: q.Since, Reason: q.Reason, By: q.By,
		LastHolder: q.LastWorker, LastHost: q.LastHost}
}

// FromHolder is h on the wire.
func FromHolder(h leasestore.Holder) Holder {
	return Holder{JobID: h.Job, WorkerID: h.Worker, Host: h.Host, PID: h.PID, FencingToken: h.Token, Attempt: h.Attempt, Slot: h.Slot,
		Command: h.Command, StartedAt: h.StartedAt.UTC(), ExpiresAt: h.ExpiresAt.UTC(), ReadAt: h.ReadAt.UTC(),
		LastRTTUS: h.LastRTT.Microseconds(), Stop: FromStop(h.Stop)}
}

// FromStop is s on the wire; nil for nil.
func FromStop(s *leasestore.StopRequest) *StopRequest {
	if s == nil {
		return nil
	}
	return &StopRequest{By: s.By, Reason: s.Reason, RequestedAt: s.At.UTC()}
}

// ToStore is the stop request s describes; nil for nil.
func (s *StopRequest) ToStore() *leasestore.StopRequest {
	if s == nil {
		return nil
	}
	return &leasestore.StopRequest{By: s.By, Reason: s.Reason, At: s.RequestedAt}
}

// ToStore is the live lease h describes.
func (h *Holder) ToStore() leasestore.Holder {
	return leasestore.Holder{Job: h.JobID, Worker: h.WorkerID, Host: h.Host, PID: h.PID, Token: h.FencingToken,
		Attempt: h.Attempt, Slot: h.Slot, Command: h.Command, StartedAt: h.StartedAt, ExpiresAt: h.ExpiresAt, ReadAt: h.ReadAt,
		LastRTT: time.Duration(h.LastRTTUS) * time.Microsecond, Stop: h.Stop.ToStore()}
}

// ExecutionState is the execution state the API reports beside leasectl's
// own (JobStatus.State beside LeaseState), in the words of a client that
// runs jobs through it and asks whether one is done: RUNNING while a
// run holds a live lease; else FAILED when it is quarantined (refused
// until an operator acts); else COMPLETED when its last run completed;
// else PENDING (never run, or its last run failed, crashed or did not
// start: it may be retried).
func ExecutionState(st *leasestore.JobStatus) string {
	switch {
	case st.Holder != nil:
		return "RUNNING"
	case st.Quarantine != nil:
		return "FAILED"
	case st.LastOutcome != nil && st.LastOutcome.Result == leasestore.ResultCompleted:
		return "COMPLETED"
	default:
		return "PENDING"
	}
}

// FromStatus is st on the wire.
func FromStatus(st *leasestore.JobStatus) JobStatus {
	a := JobStatus{
		JobID: st.Job, State: ExecutionState(st), LeaseState: string(st.State), FencingToken: st.LastToken,
		Attempt: st.Attempts, Region: st.Region, Now: st.Now.UTC(), Crashes: st.Crashes, MaxCrashes: st.MaxCrashes,
		History: make([]Event, 0, len(st.History)),
		Slots:   max(st.Slots, 1), Holders: make([]Holder, 0, len(st.Holders)), Queue: make([]Waiter, 0, len(st.Queue)),
	}
	for _, h := range st.Holders {
		w := FromHolder(h)
		w.ReadAt = a.Now
		a.Holders = append(a.Holders, w)
	}
	for _, w := range st.Queue {
		a.Queue = append(a.Queue, Waiter{WorkerID: w.Worker, Host: w.Host, PID: w.PID, Since: w.Since.UTC(), Until: w.Until.UTC()})
	}
	if st.Holder != nil {
		h := FromHolder(*st.Holder)
		h.ReadAt = a.Now
		a.Holder, a.Owner = &h, h.WorkerID
		expiry := h.ExpiresAt
		a.LeaseExpiry = &expiry
	}
	if st.Crashed != nil {
		c := FromCrash(*st.Crashed)
		a.Crashed = &c
	}
	if st.Quarantine != nil {
		q := FromQuarantine(*st.Quarantine)
		a.Quarantine = &q
	}
	if o := st.LastOutcome; o != nil {
		a.LastOutcome = &LastOutcome{Result: string(o.Result), ExitCode: o.ExitCode, Signal: o.Signal,
			DurationMS: MS(o.Duration), Reason: o.Reason, WorkerID: o.Worker, FencingToken: o.Token, FinishedAt: o.FinishedAt.UTC()}
	}
	if !st.LastSuccess.IsZero() {
		t := st.LastSuccess.UTC()
		a.LastSuccess = &t
	}
	a.Expect, a.Overdue = FromExpectation(st.Expect), st.Overdue()
	for _, e := range st.History {
		a.History = append(a.History, Event{At: e.At.UTC(), Event: string(e.Kind), WorkerID: e.Worker, FencingToken: e.Token, Detail: e.Detail})
	}
	return a
}

// ToStore is the status a describes.
func (a *JobStatus) ToStore() *leasestore.JobStatus {
	st := &leasestore.JobStatus{
		Job: a.JobID, State: leasestore.State(a.LeaseState), Now: a.Now, Region: a.Region, LastToken: a.FencingToken,
		Attempts: a.Attempt, Crashes: a.Crashes, MaxCrashes: a.MaxCrashes, LastSuccess: timeOf(a.LastSuccess),
		Slots: a.Slots,
	}
	for _, h := range a.Holders {
		held := h.ToStore()
		held.ReadAt = time.Time{}
		st.Holders = append(st.Holders, held)
	}
	for _, w := range a.Queue {
		st.Queue = append(st.Queue, leasestore.Waiter{Worker: w.WorkerID, Host: w.Host, PID: w.PID, Since: w.Since, Until: w.Until})
	}
	if a.Expect != nil {
		x := a.Expect.store()
		st.Expect = &x
	}
	if a.Holder != nil {
		h := a.Holder.ToStore()
		h.ReadAt = time.Time{}
		st.Holder = &h
	}
	if a.Crashed != nil {
		c := a.Crashed.ToStore()
		st.Crashed = &c
	}
	if a.Quarantine != nil {
		q := a.Quarantine.ToStore()
		st.Quarantine = &q
	}
	if o := a.LastOutcome; o != nil {
		st.LastOutcome = &leasestore.LastOutcome{
			Outcome: leasestore.Outcome{Result: leasestore.Result(o.Result), ExitCode: o.ExitCode, Signal: o.Signal,
				Duration: Duration(o.DurationMS), Reason: o.Reason},
			Worker: o.WorkerID, Token: o.FencingToken, FinishedAt: o.FinishedAt,
		}
	}
	for _, e := range a.History {
		st.History = append(st.History, leasestore.Event{At: e.At, Kind: leasestore.EventKind(e.Event), Worker: e.WorkerID,
			Token: e.FencingToken, Detail: e.Detail})
	}
	return st
}
