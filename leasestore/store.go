package leasestore

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// HistoryLimit is how many events a job's history keeps; older ones are
// dropped so that a job at rest costs a bounded amount of store memory.
const HistoryLimit = 20

// Leaser is what a supervisor needs of a store: the lease's own transitions,
// the release notifications a waiter sleeps on, the outcomes that did not
// reach the store in time, its own job's history (for grants whose
// answers never arrived), and the job's queue of waiters it leaves.
type Leaser interface {
	// Acquire grants the lease on req.Job to req.Holder. In one atomic step it
	// refuses a quarantined job (*QuarantinedError), a job of another region
	// than req.Region (*RegionError), a job whose lease is live
	// (*HeldError), a job past req.Deadline (*DeadlineError) and a job
	// completed successfully less than req.MinInterval ago (*TooSoonError);
	// counts the previous run's crash when its evidence is there without
	// liveness (possibly quarantining the job, which then refuses this
	// request); and writes liveness and evidence with the next fencing token.
	//
	// Acquire is idempotent for the holder: when req.Holder already holds
	// the job's live lease, it returns that lease (same token and attempt)
	// with its liveness extended as Renew would, and changes nothing else.
	// A caller whose answer was lost can therefore ask again. A holder that
	// gave up on its grant (RecordLate with Token 0) is refused with
	// ErrLeaseLost: its request may still arrive after it gave up.
	Acquire(ctx context.Context, req AcquireRequest) (*Lease, error)

	// Renew extends the liveness of l by l.TTL and the evidence by its own
	// TTL. It returns ErrLeaseLost when l is no longer the live lease of its
	// job (expired, or granted to someone else since).
	Renew(ctx context.Context, l *Lease) error

	// Release ends l with outcome out: deletes liveness and evidence, records
	// the outcome, updates the crash count, and wakes waiters. It succeeds
	// while l's evidence is there, even after its liveness expired: the
	// supervisor saw the run end, so it is no crash. It returns ErrLeaseLost,
	// and changes nothing, when l's token is no longer the job's current one
	// or its evidence is gone (counted as a crash, or expired).
	Release(ctx context.Context, l *Lease, out Outcome) error

	// Subscribe starts delivering job's notifications to waiter, the holder
	// that will wait (docs/semantics.md, Subscribe). Call it before the
	// Acquire whose refusal you will wait on, so that a notification in
	// between is not missed. A store that wakes waiters in their turn
	// (Abilities.WakesInTurn in the conformance suite) delivers only those
	// that may let waiter in: a slot free while it is among the first
	// waiters. With waiter "", every notification of the job.
	Subscribe(ctx context.Context, job, waiter string) (Subscription, error)

	// RecordLate records the outcome of a run that did not reach the store
	// in time, and undoes what its absence did. While the run's evidence is
	// there, it is Release. Once the run's crash was counted, it withdraws
	// that crash from the consecutive crashes and lifts the quarantine
	// leasectl made with it. With Token 0 (the grant's answer never reached
	// its holder, who gave up), it releases whatever grant the holder has,
	// and Acquire then refuses that holder with ErrLeaseLost. It is
	// idempotent: delivering the same outcome again changes nothing
	// (docs/semantics.md, RecordLate).
	RecordLate(ctx context.Context, late LateOutcome) (Correction, error)

	// Status reports job's state, holder, counters and history; see
	// Operator.
	Status(ctx context.Context, job string) (*JobStatus, error)

	// Leave takes holder out of job's queue of waiters, when it gives up
	// waiting (its --wait-timeout passed, a signal); a holder not in the
	// queue changes nothing. A waiter that dies without leaving lapses
	// within its own TTL instead. ctx bounds the call.
	Leave(ctx context.Context, job, holder string) error
}

// LateOutcome is the outcome of a run that did not reach the store in
// time: its Release failed (a partition, a store down), or, with Token 0,
// its grant's answer never reached its holder, who gave up on it.
type LateOutcome struct {
	Job    string
	Holder string
	Token  int64 // the run's token; 0 when its holder never learned it
	Outcome
}

// Correction is what RecordLate changed.
type Correction struct {
	// Released: the run's evidence was still there and was released, as
	// Release would have.
	Released bool
	// CrashWithdrawn: the crash counted for the run no longer counts.
	CrashWithdrawn bool
	// QuarantineLifted: the job was quarantined by leasectl in the streak
	// of crashes the withdrawn one belonged to, and is no longer.
	QuarantineLifted bool
	// Crashes is the job's consecutive crashes afterwards.
	Crashes int
}

// Operator is what the reaper and the on-call commands need of a store:
// crash accounting, quarantine, read-only views, and the notices to send.
type Operator interface {
	Notices

	// Scan finds runs whose evidence is there without liveness, counts each
	// such crash once (quarantining at the threshold the run was started
	// with) and returns what it counted.
	Scan(ctx context.Context) ([]Crash, error)

	// Quarantined lists the quarantined jobs, ordered by job.
	Quarantined(ctx context.Context) ([]Quarantine, error)
	// Quarantine puts job in quarantine by an operator's decision; Acquire
	// refuses it until ReleaseQuarantine.
	Quarantine(ctx context.Context, job string, note Note) error
	// ReleaseQuarantine lets job run again and resets its crash count. It
	// returns ErrNotQuarantined when the job was not quarantined.
	ReleaseQuarantine(ctx context.Context, job string, note Note) error

	// Stop asks the job's running child to stop, by an operator's decision:
	// its holder learns it with its next renewal (Lease.Stop), stops the
	// child (SIGTERM, then SIGKILL after its --grace) and releases the run
	// as failed, stopped by note.By, which counts no crash. The job stays
	// held until then. Asking again replaces the note. It returns
	// ErrNotRunning when the job has no live lease.
	Stop(ctx context.Context, job string, note Note) error

	// Status reports job's state, holder, counters and history. A job the
	// store has never seen is IDLE with zero counters, not an error.
	Status(ctx context.Context, job string) (*JobStatus, error)
	// Jobs lists the IDs of the jobs the store knows, those starting with
	// prefix, ordered, at most limit of them (0: no limit). A job is known
	// once it was granted or quarantined. It is for completion and listings,
	// not a hot path: on some stores it reads every job's record.
	Jobs(ctx context.Context, prefix string, limit int) ([]string, error)
	// Leases lists the live leases, ordered by job and slot, each with the
	// store's clock at the time of reading.
	Leases(ctx context.Context) ([]Holder, error)
	// Counts returns store-wide gauges: leases in flight and quarantined jobs.
	Counts(ctx context.Context) (Counts, error)

	// CheckToken returns nil when token is job's current fencing token and
	// its lease is live, and a *StaleTokenError otherwise.
	CheckToken(ctx context.Context, job string, token int64) error

	// Expect sets job's expectation by an operator's decision (x.Since is
	// the store's clock, kept when Every and Grace are unchanged), or
	// clears it when x is nil; either is recorded in the job's history.
	Expect(ctx context.Context, job string, x *Expectation, note Note) error
	// Overdue lists the jobs past their expectation at the store's clock,
	// ordered by job. Its cost follows the overdue jobs where the store
	// keeps an index by due time.
	Overdue(ctx context.Context) ([]Overdue, error)
}

// Subscription delivers release notifications for one job.
type Subscription interface {
	// Released receives a value after the job's lease was released or its
	// holder's crash was counted. Notifications coalesce: one value may
	// stand for several releases.
	Released() <-chan struct{}
	// Close stops the subscription.
	Close() error
}

// AcquireRequest describes the run that wants a lease.
type AcquireRequest struct {
	Job         string
	Holder      string // worker ID, unique per run
	Host        string
	PID         int
	Command     []string
	TTL         time.Duration // liveness TTL
	EvidenceTTL time.Duration // crash evidence TTL, longer than TTL
	MaxCrashes  int           // consecutive crashes that quarantine the job
	MinInterval time.Duration // refuse if the last success is younger; 0: off
	// Region, when not empty, is the region of the worker asking, for jobs
	// that must run in one region only. The job's first grant that names a region
	// records it, and a request naming another region is refused
	// (*RegionError). An empty Region is not restricted and records nothing.
	Region string
	// Deadline, when not zero, is the job's hard deadline (--ttl-deadline,
	// the registry API's ttl_deadline): once the store's clock is past it, the job is no longer
	// granted (*DeadlineError), so that it stops being retried. It is the
	// caller's to give, like MinInterval: the store compares, it keeps
	// nothing.
	Deadline time.Time
	// Expect, when not nil, is the job's expectation, recorded with the
	// grant (last writer wins; its Since is kept while Every and Grace are
	// unchanged). Nil leaves the job's expectation as it is.
	Expect *Expectation
	// Slots is how many runs of the job may hold a lease at once (--slots),
	// each in a slot of its own; 0 or 1: one. Every run of a job in flight
	// must ask for the same number (*SlotsError otherwise), at most the
	// store's Limits.MaxSlots.
	Slots int
	// Wait: the caller waits for the job when refused (--wait). A refused
	// request joins the job's queue of waiters (or, already in it, keeps
	// its place alive for another TTL), and a free slot goes only to the
	// oldest waiters, so runs are served in the order they started
	// waiting.
	Wait bool
}

// Lease is a granted lease.
type Lease struct {
	Job     string
	Holder  string
	Token   int64 // fencing token, strictly increasing per job
	Attempt int64 // how many times the job was granted, this one included
	// Slot is the lease's slot among the job's AcquireRequest.Slots,
	// counted from 0; always 0 for a job of one slot.
	Slot      int
	TTL       time.Duration
	GrantedAt time.Time // the store's clock
	// Recovered is the previous run's crash that this Acquire counted, if
	// any.
	Recovered *Crash
	// RTT is the round trip of the holder's last confirmed renewal (or of
	// its acquire), as the holder measured it: set by the holder, it goes
	// with the next Renew, and a store that keeps it shows it as the
	// lease's Holder.LastRTT. Zero: not measured.
	RTT time.Duration
	// Stop is set by Renew when an operator asked the run to stop
	// (Operator.Stop); nil otherwise.
	Stop *StopRequest
	// ExpectDropped is set by an Acquire that could not keep the request's
	// Expect (a registry older than expectations): the run goes on, and
	// the job is not watched for being overdue.
	ExpectDropped bool
}

// StopRequest is an operator's request that a run stop (Operator.Stop).
type StopRequest struct {
	By     string
	Reason string
	At     time.Time // the store's clock when it was asked
}

// Detail is the request in the words of history events and of the run's
// outcome: "stopped by alice@host: reason".
func (s StopRequest) Detail() string {
	return fmt.Sprintf("stopped by %s: %s", s.By, s.Reason)
}

// Result is how a run ended.
type Result string

// How a run ends. Only ResultCompleted resets the crash count; only
// ResultCrashed adds to it.
const (
	ResultCompleted  Result = "completed"   // the child exited 0
	ResultFailed     Result = "failed"      // non-zero exit, stopped by leasectl or the operator, or a signal asking to stop (SIGPIPE, SIGTERM)
	ResultCrashed    Result = "crashed"     // killed by a signal saying it crashed (SIGSEGV, SIGABRT, the OOM killer's SIGKILL)
	ResultNotStarted Result = "not-started" // the command could not be started (126/127)
)

// Outcome is how a run ended, recorded on release.
type Outcome struct {
	Result   Result
	ExitCode int // the child's exit code; -1 when it died of a signal
	Signal   int // the signal that ended the child; 0 when it exited
	Duration time.Duration
	Reason   string // why leasectl stopped it, if it did ("max-runtime", ...)
}

// Detail is the outcome in the words of a history event, e.g. "completed
// exit 0 after 1.2s" or "failed signal 15 after 3s (max-runtime)".
func (o Outcome) Detail() string {
	var b strings.Builder
	b.WriteString(string(o.Result))
	if o.Signal != 0 {
		fmt.Fprintf(&b, " signal %d", o.Signal)
	} else {
		fmt.Fprintf(&b, " exit %d", o.ExitCode)
	}
	if o.Duration > 0 {
		fmt.Fprintf(&b, " after %s", o.Duration.Round(time.Millisecond))
	}
	if o.Reason != "" {
		fmt.Fprintf(&b, " (%s)", o.Reason)
	}
	return b.String()
}

// Crash is a run whose supervisor vanished, as counted by Acquire or Scan.
// Quarantined says whether this crash quarantined the job: it reached the
// run's max-crashes while the job was not quarantined yet.
type Crash struct {
	Job         string
	Holder      string
	Host        string
	PID         int
	Token       int64
	Command     []string
	StartedAt   time.Time
	StaleSince  time.Time // when its liveness expired
	DetectedAt  time.Time
	Crashes     int // consecutive crashes, this one included
	Quarantined bool
}

// Note is who did an operator action and why.
type Note struct {
	By     string
	Reason string
}

// Quarantine describes a quarantined job.
type Quarantine struct {
	Job        string
	Crashes    int
	Since      time.Time
	Reason     string
	By         string // "leasectl" when quarantined for crashing, else the operator
	LastHolder string
	LastHost   string
}

// State is a job's state as Status reports it.
type State string

// Job states.
const (
	StateIdle        State = "IDLE"
	StateRunning     State = "RUNNING"
	StateCrashed     State = "CRASHED" // evidence without liveness, not yet counted
	StateQuarantined State = "QUARANTINED"
)

// Holder is a live lease as listed by Leases and Status.
type Holder struct {
	Job       string
	Worker    string
	Host      string
	PID       int
	Token     int64
	Attempt   int64
	Slot      int // counted from 0
	Command   []string
	StartedAt time.Time
	ExpiresAt time.Time
	// ReadAt is the store's clock when Leases read this lease: how long it
	// has run and its TTL left are relative to it, not to a local clock
	// that may be skewed against the store's.
	ReadAt time.Time
	// LastRTT is the renewal round trip the holder reported with its last
	// renewal (Lease.RTT); zero when it reported none yet, or the store does
	// not keep it.
	LastRTT time.Duration
	// Stop is the operator's request that the run stop, while it stops;
	// nil when none was made.
	Stop *StopRequest
}

// LastOutcome is the outcome of a job's last finished run.
type LastOutcome struct {
	Outcome
	Worker     string
	Token      int64
	FinishedAt time.Time
}

// JobStatus is what Status reports for one job.
type JobStatus struct {
	Job    string
	State  State
	Now    time.Time // the store's clock when the status was read
	Region string    // recorded by the job's first grant that named one
	Holder *Holder   // the live lease, if any; of several, the one in the lowest slot
	// Slots is the job's number of slots (AcquireRequest.Slots of its
	// last grant); 1 for a job never granted more.
	Slots int
	// Holders are the job's live leases, one per slot in use, by slot.
	Holders []Holder
	// Queue is the job's waiters, oldest first, lapsed ones left out.
	Queue       []Waiter
	Crashed     *Crash // uncounted crash evidence, when State is CRASHED
	LastToken   int64
	Attempts    int64
	Crashes     int // consecutive crashes
	MaxCrashes  int // threshold of the last run
	Quarantine  *Quarantine
	LastOutcome *LastOutcome
	LastSuccess time.Time // zero if the job never completed successfully
	History     []Event   // oldest first, at most HistoryLimit
	// Expect is the job's expectation; nil when it has none. The job is
	// overdue when Now is past Expect.Due(LastSuccess) (JobStatus.Overdue).
	Expect *Expectation
}

// EventKind names a history event.
type EventKind string

// History events.
const (
	EventAcquired     EventKind = "acquired"
	EventReleased     EventKind = "released"
	EventCrashed      EventKind = "crashed"
	EventQuarantined  EventKind = "quarantined"
	EventUnquarantine EventKind = "released-from-quarantine"
	EventLeaseLost    EventKind = "lease-lost"
	EventLateOutcome  EventKind = "late-outcome"
	EventStop         EventKind = "stop-requested"
	EventExpect       EventKind = "expectation-set"
)

// Event is one entry of a job's history.
type Event struct {
	At     time.Time
	Kind   EventKind
	Worker string
	Token  int64
	// Result is the run's outcome on a released or late-outcome event, and
	// on a crashed event of a run that released itself as crashed, for the
	// rules that read the history (a completion ends a crash streak; a
	// crashed outcome recorded in time is no absence to undo); empty on
	// other events, on a crashed event of a run whose supervisor vanished,
	// and on events a leasectl older than this field recorded, whose
	// detail's first word says it.
	Result Result `json:",omitempty"`
	Detail string
}

// Counts are store-wide gauges.
type Counts struct {
	InFlight    int
	Quarantined int
}
