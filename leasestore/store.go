package leasestore

import (
	"context"
	"time"
)

// HistoryLimit is how many events a job's history keeps; older ones are
// dropped so that a job at rest costs a bounded amount of store memory.
const HistoryLimit = 20

// Store keeps leases, crash evidence, quarantine state and history for jobs.
// Every method is safe for concurrent use. ctx bounds the whole call,
// including retries and connection set-up; a store that cannot answer in time
// returns an error for which errors.Is(err, ErrUnavailable) holds.
type Store interface {
	// Acquire grants the lease on req.Job to req.Holder. In one atomic step it
	// refuses a quarantined job (*QuarantinedError), a job completed
	// successfully less than req.MinInterval ago (*TooSoonError) and a job
	// whose lease is live (*HeldError); counts the previous run's crash when
	// its evidence is there without liveness (possibly quarantining the job,
	// which then refuses this request); and writes liveness and evidence
	// with the next fencing token.
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

	// Scan finds runs whose evidence is there without liveness, counts each
	// such crash once (quarantining at the threshold the run was started
	// with) and returns what it counted.
	Scan(ctx context.Context) ([]Crash, error)

	// Quarantined lists the quarantined jobs.
	Quarantined(ctx context.Context) ([]Quarantine, error)
	// Quarantine puts job in quarantine by an operator's decision; Acquire
	// refuses it until ReleaseQuarantine.
	Quarantine(ctx context.Context, job string, note Note) error
	// ReleaseQuarantine lets job run again and resets its crash count. It
	// returns ErrNotQuarantined when the job was not quarantined.
	ReleaseQuarantine(ctx context.Context, job string, note Note) error

	// Status reports job's state, holder, counters and history. A job the
	// store has never seen is IDLE with zero counters, not an error.
	Status(ctx context.Context, job string) (*JobStatus, error)
	// Leases lists the live leases, ordered by job, each with the store's
	// clock at the time of reading.
	Leases(ctx context.Context) ([]Holder, error)
	// Counts returns store-wide gauges: leases in flight and quarantined jobs.
	Counts(ctx context.Context) (Counts, error)

	// CheckToken returns nil when token is job's current fencing token and
	// its lease is live, and a *StaleTokenError otherwise.
	CheckToken(ctx context.Context, job string, token int64) error

	// Subscribe starts delivering job's release notifications. Call it
	// before the Acquire whose refusal you will wait on, so that a release
	// in between is not missed.
	Subscribe(ctx context.Context, job string) (Subscription, error)

	// Close releases the store's connections and files.
	Close() error
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
}

// Lease is a granted lease.
type Lease struct {
	Job       string
	Holder    string
	Token     int64 // fencing token, strictly increasing per job
	Attempt   int64 // how many times the job was granted, this one included
	TTL       time.Duration
	GrantedAt time.Time // the store's clock
	// Recovered is the previous run's crash that this Acquire counted, if
	// any.
	Recovered *Crash
}

// Result is how a run ended.
type Result string

// How a run ends. Only ResultCompleted resets the crash count; only
// ResultCrashed adds to it.
const (
	ResultCompleted  Result = "completed"   // the child exited 0
	ResultFailed     Result = "failed"      // non-zero exit, or stopped by leasectl or the operator
	ResultCrashed    Result = "crashed"     // killed by a signal nobody sent through leasectl
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

// Crash is a run whose supervisor vanished, as counted by Acquire or Scan.
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
	Command   []string
	StartedAt time.Time
	ExpiresAt time.Time
	// ReadAt is the store's clock when Leases read this lease: how long it
	// has run and its TTL left are relative to it, not to a local clock
	// that may be skewed against the store's.
	ReadAt time.Time
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
	Job         string
	State       State
	Now         time.Time // the store's clock when the status was read
	Holder      *Holder   // the live lease, if any
	Crashed     *Crash    // uncounted crash evidence, when State is CRASHED
	LastToken   int64
	Attempts    int64
	Crashes     int // consecutive crashes
	MaxCrashes  int // threshold of the last run
	Quarantine  *Quarantine
	LastOutcome *LastOutcome
	LastSuccess time.Time // zero if the job never completed successfully
	History     []Event   // oldest first, at most HistoryLimit
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
)

// Event is one entry of a job's history.
type Event struct {
	At     time.Time
	Kind   EventKind
	Worker string
	Token  int64
	Detail string
}

// Counts are store-wide gauges.
type Counts struct {
	InFlight    int
	Quarantined int
}
