package api

import "time"

// AcquireRequest is the body of POST PathAcquire: job_id, worker_id and
// region, which any client sends, and what leasectl's own runs add. Only job_id and
// worker_id are required; see DefaultTTL and its neighbours for the rest.
type AcquireRequest struct {
	JobID         string     `json:"job_id"`
	WorkerID      string     `json:"worker_id"`
	Region        string     `json:"region,omitempty"`
	Host          string     `json:"host,omitempty"`
	PID           int        `json:"pid,omitempty"`
	Command       []string   `json:"command,omitempty"`
	TTLMS         int64      `json:"ttl_ms,omitempty"`
	EvidenceTTLMS int64      `json:"evidence_ttl_ms,omitempty"`
	MaxCrashes    int        `json:"max_crashes,omitempty"`
	MinIntervalMS int64      `json:"min_interval_ms,omitempty"`
	TTLDeadline   *time.Time `json:"ttl_deadline,omitempty"`
	// Expect is the run's expectation for the job (last writer wins).
	Expect *Expectation `json:"expect,omitempty"`
	// Slots is how many runs of the job may hold it at once (--slots);
	// 0 or absent: one. Wait: the worker waits, and joins the job's queue
	// when refused.
	Slots int  `json:"slots,omitempty"`
	Wait  bool `json:"wait,omitempty"`
}

// LeaveRequest is the body of POST PathLeave: a waiting worker gives up.
type LeaveRequest struct {
	JobID    string `json:"job_id"`
	WorkerID string `json:"worker_id"`
}

// Lease is the answer to an acquire: fencing_token, lease_expiry, attempt
// and ttl_deadline, and the rest of the grant.
type Lease struct {
	JobID        string    `json:"job_id"`
	WorkerID     string    `json:"worker_id"`
	FencingToken int64     `json:"fencing_token"`
	Attempt      int64     `json:"attempt"`
	Slot         int       `json:"slot"` // from 0
	TTLMS        int64     `json:"ttl_ms"`
	GrantedAt    time.Time `json:"granted_at"`   // the store's clock
	LeaseExpiry  time.Time `json:"lease_expiry"` // granted_at + ttl
	// Region is the request's; the job's own is in its status.
	Region      string     `json:"region,omitempty"`
	TTLDeadline *time.Time `json:"ttl_deadline,omitempty"`
	// Recovered is the previous run's crash this grant counted, if any.
	Recovered *Crash `json:"recovered,omitempty"`
}

// HeartbeatRequest is the body of POST PathHeartbeat. ttl_ms is required:
// a renewal extends the lease by it, and a request without it would leave
// the registry guessing.
type HeartbeatRequest struct {
	JobID        string `json:"job_id"`
	WorkerID     string `json:"worker_id"`
	FencingToken int64  `json:"fencing_token"`
	TTLMS        int64  `json:"ttl_ms"`
	// RTTUS is the round trip of the worker's last confirmed renewal (or of
	// its acquire), in microseconds, as the worker measured it (Lease.RTT);
	// status and leases show it as the holder's last_rtt_us. Optional: 0 or
	// absent, not measured.
	RTTUS int64 `json:"rtt_us,omitempty"`
}

// Heartbeat is the answer to a heartbeat.
type Heartbeat struct {
	// NewLeaseExpiry is when the renewal was sent to the store plus the
	// TTL, by the registry's clock: the store set its expiry no earlier.
	NewLeaseExpiry time.Time `json:"new_lease_expiry"`
	TTLMS          int64     `json:"ttl_ms"`
	// Stop is an operator's request that the run stop (PathStop); absent
	// when none was made.
	Stop *StopRequest `json:"stop,omitempty"`
}

// StopRequest is an operator's request that a run stop.
type StopRequest struct {
	By          string    `json:"by"`
	Reason      string    `json:"reason"`
	RequestedAt time.Time `json:"requested_at"`
}

// CompleteRequest is the body of POST PathComplete: the run ends as
// completed, with the token checked.
type CompleteRequest struct {
	JobID        string `json:"job_id"`
	WorkerID     string `json:"worker_id"`
	FencingToken int64  `json:"fencing_token"`
	// Result is a short description of what the job produced (at most
	// MaxTextLen bytes), kept as the outcome's reason.
	Result     string `json:"result,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
}

// ReleaseRequest is the body of POST PathRelease: the run ends with an
// outcome, failed unless result says otherwise.
type ReleaseRequest struct {
	JobID        string `json:"job_id"`
	WorkerID     string `json:"worker_id"`
	FencingToken int64  `json:"fencing_token"`
	// Result is completed, failed (the default), crashed or not-started.
	Result     string `json:"result,omitempty"`
	ExitCode   int    `json:"exit_code,omitempty"`
	Signal     int    `json:"signal,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// RecordLateRequest is the body of POST PathRecordLate: the outcome of a
// run that did not reach the store in time (leasestore.LateOutcome). The
// run is named by job, worker and fencing token; a fencing token of 0 (or
// none) says the worker never learned its grant's token and gave up on it,
// with result not-started.
type RecordLateRequest struct {
	JobID        string `json:"job_id"`
	WorkerID     string `json:"worker_id"`
	FencingToken int64  `json:"fencing_token,omitempty"`
	// Result is completed, failed (the default), crashed or not-started.
	Result     string `json:"result,omitempty"`
	ExitCode   int    `json:"exit_code,omitempty"`
	Signal     int    `json:"signal,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// Correction is the answer to POST PathRecordLate: what the late outcome
// changed (leasestore.Correction). A second delivery of the same outcome
// changes nothing and answers all false, with the crashes as they are.
type Correction struct {
	Released         bool `json:"released"`
	CrashWithdrawn   bool `json:"crash_withdrawn"`
	QuarantineLifted bool `json:"quarantine_lifted"`
	Crashes          int  `json:"crashes"`
}

// Success is the answer to complete, release, quarantine and unquarantine.
type Success struct {
	Success bool `json:"success"`
}

// JobStatus is the answer to GET PathStatus: a job's execution state,
// owner, fencing_token, lease_expiry and attempt, for clients that run jobs
// through the API, then everything leasectl's own status shows.
type JobStatus struct {
	JobID string `json:"job_id"`
	// State is the job's execution state: PENDING, RUNNING, COMPLETED or
	// FAILED (see ExecutionState).
	State string `json:"state"`
	// LeaseState is leasectl's: IDLE, RUNNING, CRASHED or QUARANTINED.
	LeaseState   string       `json:"lease_state"`
	Owner        string       `json:"owner"`         // the live lease's worker; "" when none
	FencingToken int64        `json:"fencing_token"` // the last token granted; 0 if none
	LeaseExpiry  *time.Time   `json:"lease_expiry"`  // the live lease's; null when none
	Attempt      int64        `json:"attempt"`       // how many times the job was granted
	Region       string       `json:"region"`
	Now          time.Time    `json:"now"` // the store's clock
	Holder       *Holder      `json:"holder"`
	Crashed      *Crash       `json:"crashed"`
	Crashes      int          `json:"crashes"`
	MaxCrashes   int          `json:"max_crashes"`
	Quarantine   *Quarantine  `json:"quarantine"`
	LastOutcome  *LastOutcome `json:"last_outcome"`
	LastSuccess  *time.Time   `json:"last_success"`
	History      []Event      `json:"history"`
	Expect       *Expectation `json:"expect"`  // null: none
	Overdue      bool         `json:"overdue"` // past its expectation at now
	// Slots is the job's number of slots; Holders its live leases by
	// slot; Queue its waiters, oldest first.
	Slots   int      `json:"slots"`
	Holders []Holder `json:"holders"`
	Queue   []Waiter `json:"queue"`
}

// Waiter is a worker waiting in a job's queue; its position is its place
// in JobStatus.Queue, from 1.
type Waiter struct {
	WorkerID string    `json:"worker_id"`
	Host     string    `json:"host"`
	PID      int       `json:"pid"`
	Since    time.Time `json:"since"`
	Until    time.Time `json:"until"` // when its place lapses unless it asks again
}

// Holder is a live lease.
type Holder struct {
	JobID        string    `json:"job_id"`
	WorkerID     string    `json:"worker_id"`
	Host         string    `json:"host"`
	PID          int       `json:"pid"`
	FencingToken int64     `json:"fencing_token"`
	Attempt      int64     `json:"attempt"`
	Slot         int       `json:"slot"`
	Command      []string  `json:"command"`
	StartedAt    time.Time `json:"started_at"`
	ExpiresAt    time.Time `json:"expires_at"`
	ReadAt       time.Time `json:"read_at"`
	// LastRTTUS is the renewal round trip, in microseconds, the worker
	// reported with its last heartbeat; 0 when it reported none yet, or the
	// store behind the registry does not keep it.
	LastRTTUS int64 `json:"last_rtt_us"`
	// Stop is an operator's request that the run stop, while it stops;
	// absent when none was made.
	Stop *StopRequest `json:"stop,omitempty"`
}

// Crash is a run whose supervisor vanished.
type Crash struct {
	JobID        string    `json:"job_id"`
	WorkerID     string    `json:"worker_id"`
	Host         string    `json:"host"`
	PID          int       `json:"pid"`
	FencingToken int64     `json:"fencing_token"`
	Command      []string  `json:"command"`
	StartedAt    time.Time `json:"started_at"`
	StaleSince   time.Time `json:"stale_since"`
	DetectedAt   time.Time `json:"detected_at"`
	Crashes      int       `json:"crashes"`
	Quarantined  bool      `json:"quarantined"`
}

// Quarantine is a quarantined job.
type Quarantine struct {
	JobID      string    `json:"job_id"`
	Crashes    int       `json:"crashes"`
	Since      time.Time `json:"since"`
	Reason     string    `json:"reason"`
	By         string    `json:"by"`
	LastWorker string    `json:"last_worker"`
	LastHost   string    `json:"last_host"`
}

// LastOutcome is how the job's last run ended.
type LastOutcome struct {
	Result       string    `json:"result"`
	ExitCode     int       `json:"exit_code"`
	Signal       int       `json:"signal"`
	DurationMS   int64     `json:"duration_ms"`
	Reason       string    `json:"reason"`
	WorkerID     string    `json:"worker_id"`
	FencingToken int64     `json:"fencing_token"`
	FinishedAt   time.Time `json:"finished_at"`
}

// Event is one entry of a job's history.
type Event struct {
	At           time.Time `json:"at"`
	Event        string    `json:"event"`
	WorkerID     string    `json:"worker_id"`
	FencingToken int64     `json:"fencing_token"`
	Detail       string    `json:"detail"`
}

// ScanResult is the answer to POST PathScan: the crashes this pass
// counted. They are consumed: a later scan will not find them again.
type ScanResult struct {
	Crashes []Crash `json:"crashes"`
}

// Leases is the answer to GET PathLeases, ordered by job.
type Leases struct {
	Leases []Holder `json:"leases"`
}

// QuarantinedJobs is the answer to GET PathQuarantined, ordered by job.
type QuarantinedJobs struct {
	Jobs []Quarantine `json:"jobs"`
}

// MaxJobsListed bounds what one GET PathJobs lists: enough for completion
// and an on-call listing, not a bulk export.
const MaxJobsListed = 10000

// JobIDs is the answer to GET PathJobs: the known jobs' IDs, ordered.
type JobIDs struct {
	Jobs []string `json:"jobs"`
}

// Counts is the answer to GET PathCounts.
type Counts struct {
	InFlight    int `json:"in_flight"`
	Quarantined int `json:"quarantined"`
}

// NoteRequest is the body of POST PathQuarantine and PathUnquarantine: the
// job, who acts and why.
type NoteRequest struct {
	JobID  string `json:"job_id"`
	By     string `json:"by"`
	Reason string `json:"reason"`
}

// TokenCheck is the answer to GET PathCheckToken for a current token; a
// stale one is an error (code stale_token) with the same fields.
type TokenCheck struct {
	JobID        string `json:"job_id"`
	FencingToken int64  `json:"fencing_token"`
	Valid        bool   `json:"valid"`
	CurrentToken int64  `json:"current_token"`
	Live         bool   `json:"live"`
}

// SubscribeRequest is the body of POST PathSubscribe. WorkerID, when set,
// is the waiter the subscription is for: while two or more subscriptions
// of the job name theirs, a release wakes only the oldest of them and
// those whose turn it is (the first waiters of the job's queue, as many as
// slots are free).
type SubscribeRequest struct {
	JobID    string `json:"job_id"`
	WorkerID string `json:"worker_id,omitempty"`
}

// Subscription is the answer to a subscribe: from now on, every release of
// the job is kept for the subscription until a wait collects it.
type Subscription struct {
	SubscriptionID string `json:"subscription_id"`
	JobID          string `json:"job_id"`
	// IdleTimeoutMS is how long the registry keeps a subscription nobody
	// waits on before it drops it.
	IdleTimeoutMS int64 `json:"idle_timeout_ms"`
}

// Wait is the answer to a long-poll: released is true when the job was
// released (or its crash counted, or it left quarantine) since the
// subscription's last wait; false when the wait timed out.
type Wait struct {
	Released bool `json:"released"`
}

// TokenWatchRequest is the body of POST PathTokenWatches.
type TokenWatchRequest struct {
	JobID string `json:"job_id"`
}

// TokenState is one state of a job's fencing token as the token feed of
// the registry's store reported it (leasestore.TokenState), numbered in
// its watch.
type TokenState struct {
	// Seq numbers the watch's states from 1, without gaps but for heartbeat
	// reads that repeat the state before them, which the registry leaves
	// out.
	Seq          int64 `json:"seq"`
	FencingToken int64 `json:"fencing_token"` // the job's newest token; 0 when the store has none
	Live         bool  `json:"live"`          // whether its run was live
	Read         bool  `json:"read"`          // read from the store: it replaces what came before
	Lost         bool  `json:"lost"`          // the store's feed was interrupted: nothing holds until the next read
}

// TokenWatch is the answer to POST PathTokenWatches: the watch is in place
// in the registry's store, and states holds what it reported so far, a
// read of the job's state first.
type TokenWatch struct {
	WatchID string `json:"watch_id"`
	JobID   string `json:"job_id"`
	// IdleTimeoutMS is how long the registry keeps a watch nobody polls
	// before it drops it.
	IdleTimeoutMS int64        `json:"idle_timeout_ms"`
	States        []TokenState `json:"states"`
}

// TokenStates is the answer to GET PathTokenWatch: the watch's states after
// the one the poll acknowledged, oldest first; empty when the poll timed
// out.
type TokenStates struct {
	States []TokenState `json:"states"`
}

// TokenSyncRequest is the body of POST PathTokenSync: the caller's watches.
type TokenSyncRequest struct {
	WatchIDs []string `json:"watch_ids"`
}

// TokenSync is the answer to POST PathTokenSync. Every change the store
// published before the sync was asked for is numbered at or below its
// watch's seq here; a watch the registry no longer holds (expired, fallen
// behind, dropped by a restart, or another token's) is listed as missing.
type TokenSync struct {
	Watches []TokenWatchSeq `json:"watches"`
	Missing []string        `json:"missing"`
}

// TokenWatchSeq is the sequence number one watch has reached.
type TokenWatchSeq struct {
	WatchID string `json:"watch_id"`
	Seq     int64  `json:"seq"`
}
