package leasestore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// A notice is an event worth telling people about (a crash counted, a job
// quarantined, a lease lost...), kept in the store until a reaper has sent
// it to the configured sinks (package notify): recorded before it is sent,
// claimed by one reaper at a time, and marked sent after the sink took it,
// so that none is lost and, past its Key, none is sent twice
// (docs/semantics.md, Notices).

// NoticeKind names what a notice tells.
type NoticeKind string

// Notice kinds.
const (
	NoticeCrash       NoticeKind = "crash"               // a crash counted (Scan, the next run's Acquire, the run's release)
	NoticeQuarantined NoticeKind = "quarantined"         // a job quarantined, for crashing or by an operator
	NoticeReleased    NoticeKind = "quarantine-released" // an operator let a quarantined job run again
	NoticeLeaseLost   NoticeKind = "lease-lost"          // a run's lease was lost and its child killed
	NoticeOverdue     NoticeKind = "overdue"             // a job is past its expectation
	NoticeBackInTime  NoticeKind = "back-in-time"        // an overdue job succeeded, or its expectation was cleared
)

// NoticeKinds are the notice kinds, in the order docs/semantics.md lists
// them.
var NoticeKinds = []NoticeKind{NoticeCrash, NoticeQuarantined, NoticeReleased, NoticeLeaseLost, NoticeOverdue, NoticeBackInTime}

// NoticeRetention is how long a store keeps a notice after it was recorded,
// sent or not: long enough to ride out a sink down over a weekend, short
// enough that a store whose reapers send nothing stays small. A notice not
// sent within it is dropped, and so is its Key (the same event put again
// after that is a new notice).
const NoticeRetention = 7 * 24 * time.Hour

// NoticeCap is the most notices a store keeps; past it, the sent ones are
// dropped first, oldest first, and only then unsent ones, from the jobs
// with the most first (rules.PruneNotices), so that a crash storm with no
// sink configured costs a bounded amount of store memory (a notice is
// about half a kilobyte), and a flood of one job's notices (a worker's
// token may put notices) pushes out its own before any other job's.
const NoticeCap = 10000

// MaxNoticeClaim bounds how many notices one ClaimNotices returns.
const MaxNoticeClaim = 1000

// ErrNoticeNotHeld means SettleNotice's owner no longer holds the notice's
// claim: it expired and another reaper may have claimed it, or it was
// settled already.
var ErrNoticeNotHeld = errors.New("leasestore: notice not claimed by this owner")

// Notice is one event to notify, and where its delivery stands.
type Notice struct {
	// Key identifies the event: putting a notice whose Key the store keeps
	// changes nothing, and sinks receive it as the idempotency key.
	Key  string     `json:"key"`
	Kind NoticeKind `json:"kind"`
	Job  string     `json:"job"`
	// At is when the event happened, by the clock of whoever saw it.
	At     time.Time `json:"at"`
	Worker string    `json:"worker,omitempty"`
	Host   string    `json:"host,omitempty"`
	Token  int64     `json:"token,omitempty"`
	// Crashes is the job's consecutive crashes (crash, quarantined).
	Crashes int `json:"crashes,omitempty"`
	// By is who did it: the operator, or "leasectl".
	By string `json:"by,omitempty"`
	// Due is when an overdue job became due (overdue, back-in-time).
	Due time.Time `json:"due,omitzero"`
	// Detail says what happened in a person's words.
	Detail string `json:"detail"`

	// Delivery, kept by the store (package rules).
	Recorded time.Time `json:"recorded,omitzero"` // when the store took it
	// NextAt is when it is due for (another) delivery attempt.
	NextAt time.Time `json:"next_at,omitzero"`
	// Owner holds the claim until ClaimedUntil.
	Owner        string    `json:"owner,omitempty"`
	ClaimedUntil time.Time `json:"claimed_until,omitzero"`
	// Attempts counts the claims; LastError is the last failed attempt's.
	Attempts  int    `json:"attempts,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// SentTo are the sinks that took it (their IDs, package notify), so
	// that a retry goes to the others alone.
	SentTo []string  `json:"sent_to,omitempty"`
	SentAt time.Time `json:"sent_at,omitzero"` // zero until every sink took it
}

// Sent reports whether the notice was delivered.
func (n *Notice) Sent() bool { return !n.SentAt.IsZero() }

// MaxNoticeSinks bounds the sinks a notice keeps in SentTo, and
// MaxSinkID the length of each one's ID.
const (
	MaxNoticeSinks = 64
	MaxSinkID      = 256
)

// Validate checks a notice to put before any I/O.
func (n *Notice) Validate() error {
	switch {
	case n.Key == "" || len(n.Key) > 512:
		return fmt.Errorf("a notice needs a key of 1 to 512 bytes, not %d", len(n.Key))
	case n.Kind == "":
		return fmt.Errorf("notice %q has no kind", n.Key)
	case n.At.IsZero():
		return fmt.Errorf("notice %q has no time", n.Key)
	}
	return ValidateJobID(n.Job)
}

// Settlement is how a claimed notice's delivery went.
type Settlement struct {
	// Sent: every sink took it, in this attempt or before.
	Sent bool
	// SentTo are the sinks that took it in this attempt, kept with those
	// that took it before (Notice.SentTo), sent or not.
	SentTo []string
	// RetryIn is when to try again, from the store's clock, when not Sent.
	RetryIn time.Duration
	// Error is why it was not sent, for people (no secrets in it).
	Error string
}

// Notices is what the reaper needs of a store to notify events; part of
// Operator.
type Notices interface {
	// PutNotices records notices not yet kept, by Key: one whose Key the
	// store keeps (sent or not) is left as it is. A new notice is due at
	// once.
	PutNotices(ctx context.Context, notices []Notice) error
	// ClaimNotices claims for owner, until hold from the store's clock, up
	// to limit (at most MaxNoticeClaim) notices due for delivery: not sent,
	// their NextAt passed, and not claimed by another owner whose claim
	// holds. Each notice is claimed by one owner at a time, oldest first.
	ClaimNotices(ctx context.Context, owner string, limit int, hold time.Duration) ([]Notice, error)
	// SettleNotice ends owner's claim on the notice with key: sent, or due
	// again after s.RetryIn. It returns ErrNoticeNotHeld, and changes
	// nothing, when owner's claim expired or the notice is gone.
	SettleNotice(ctx context.Context, key, owner string, s Settlement) error
	// ListNotices returns the notices the store keeps, oldest first, at
	// most NoticeCap of them.
	ListNotices(ctx context.Context) ([]Notice, error)
}

// NoticeKey is the key of an event of kind about job, told apart from the
// job's other events of that kind by id (a token, a due time).
func NoticeKey(kind NoticeKind, job string, id int64) string {
	return string(kind) + "/" + job + "/" + strconv.FormatInt(id, 10)
}

// CrashNotices are the notices of crash c, a run whose supervisor
// vanished: the crash, and the quarantine it led to.
func CrashNotices(c Crash) []Notice {
	return crashNotices(c, fmt.Sprintf("worker %s on %s (pid %d) vanished", c.Holder, c.Host, c.PID))
}

// ReportedCrashNotices are the notices of crash c, which its own
// supervisor reported with its outcome (a child killed by SIGSEGV, by the
// OOM killer), why saying how the child died: the crash, and the
// quarantine it led to.
func ReportedCrashNotices(c Crash, why string) []Notice {
	return crashNotices(c, fmt.Sprintf("%s (worker %s on %s)", why, c.Holder, c.Host))
}

func crashNotices(c Crash, why string) []Notice {
	ns := []Notice{{Key: NoticeKey(NoticeCrash, c.Job, c.Token), Kind: NoticeCrash, Job: c.Job, At: c.DetectedAt,
		Worker: c.Holder, Host: c.Host, Token: c.Token, Crashes: c.Crashes, By: ByLeasectl,
		Detail: fmt.Sprintf("job %s crashed: %s; %d consecutive crashes", c.Job, why, c.Crashes)}}
	if c.Quarantined {
		ns = append(ns, Notice{Key: NoticeKey(NoticeQuarantined, c.Job, c.Token), Kind: NoticeQuarantined, Job: c.Job,
			At: c.DetectedAt, Worker: c.Holder, Host: c.Host, Token: c.Token, Crashes: c.Crashes, By: ByLeasectl,
			Detail: fmt.Sprintf("job %s is quarantined after %d consecutive crashes", c.Job, c.Crashes)})
	}
	return ns
}

// CountedCrash is the crash of l's run as st, the job's status read after
// the store took the run's crashed outcome, shows it: when it was counted
// (its crashed event), the job's consecutive crashes, and whether it
// quarantined the job (a quarantined event of the run's). It reports false
// when st's history holds no crash of the run.
func CountedCrash(st *JobStatus, l *Lease, host string, pid int) (Crash, bool) {
	c := Crash{Job: l.Job, Holder: l.Holder, Host: host, PID: pid, Token: l.Token, Crashes: st.Crashes}
	found := false
	for _, e := range st.History {
		if e.Worker != l.Holder || e.Token != l.Token {
			continue
		}
		switch e.Kind {
		case EventCrashed:
			c.DetectedAt, found = e.At, true
		case EventQuarantined:
			c.Quarantined = true
		}
	}
	return c, found
}

// QuarantineNotice is the notice of job quarantined (released false) or
// released from quarantine by an operator's note at at (the command's
// clock, to the millisecond: it tells one decision from the next).
func QuarantineNotice(job string, released bool, note Note, at time.Time) Notice {
	kind, words := NoticeQuarantined, "quarantined"
	if released {
		kind, words = NoticeReleased, "released from quarantine"
	}
	return Notice{Key: NoticeKey(kind, job, at.UnixMilli()), Kind: kind, Job: job, At: at, By: note.By,
		Detail: fmt.Sprintf("job %s %s by %s: %s", job, words, note.By, note.Reason)}
}

// LeaseLostNotice is the notice of l's lease lost at at, its child killed
// for it, why saying how.
func LeaseLostNotice(l *Lease, host, why string, at time.Time) Notice {
	return Notice{Key: NoticeKey(NoticeLeaseLost, l.Job, l.Token), Kind: NoticeLeaseLost, Job: l.Job, At: at,
		Worker: l.Holder, Host: host, Token: l.Token,
		Detail: fmt.Sprintf("job %s lost its lease (token %d) on %s and its child was killed: %s", l.Job, l.Token, host, why)}
}

// OverdueNotice is the notice of o, an overdue job.
func OverdueNotice(o Overdue, line string) Notice {
	return Notice{Key: NoticeKey(NoticeOverdue, o.Job, o.Due.UnixMicro()), Kind: NoticeOverdue, Job: o.Job, At: o.Now,
		Due: o.Due, By: ByLeasectl, Detail: line}
}

// BackInTimeNotice is the notice that job, overdue since due, no longer is
// at at.
func BackInTimeNotice(job string, due, at time.Time) Notice {
	return Notice{Key: NoticeKey(NoticeBackInTime, job, due.UnixMicro()), Kind: NoticeBackInTime, Job: job, At: at,
		Due: due, By: ByLeasectl, Detail: fmt.Sprintf("job %s is back in time", job)}
}
