package rules

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// The rules of notices (leasestore.Notices): a notice is recorded once per
// key, due at once; claimed by one owner at a time, for a hold, while it is
// due; settled by its owner as sent, or due again after a delay; and kept
// for leasestore.NoticeRetention, at most leasestore.NoticeCap of them.

// NewNotice is notice n as the store records it at now: due at once, no
// delivery yet.
func NewNotice(n leasestore.Notice, now time.Time) leasestore.Notice {
	n.Recorded, n.NextAt = now, now
	n.Owner, n.ClaimedUntil, n.Attempts, n.LastError, n.SentTo, n.SentAt = "", time.Time{}, 0, "", nil, time.Time{}
	return n
}

// NoticeDue reports whether n may be claimed at now: not sent, its NextAt
// passed, and no claim holding.
func NoticeDue(n *leasestore.Notice, now time.Time) bool {
	return !n.Sent() && !now.Before(n.NextAt) && (n.Owner == "" || !now.Before(n.ClaimedUntil))
}

// ClaimNotice claims n for owner until now+hold when it is due, counting
// the attempt, and reports whether it did.
func ClaimNotice(n *leasestore.Notice, owner string, hold time.Duration, now time.Time) bool {
	if !NoticeDue(n, now) {
		return false
	}
	n.Owner, n.ClaimedUntil = owner, expiry(now, hold)
	n.Attempts++
	return true
}

// SettleNotice ends owner's claim on n at now as s says: sent, or due again
// after s.RetryIn; either way the sinks that took it (s.SentTo) join those
// that took it before, so that a retry goes to the others alone, each sink
// getting it once (at most leasestore.MaxNoticeSinks are kept). A claim past its hold is still owner's until another
// owner claims the notice: the sink took it, and saying so spares a second
// delivery. It refuses with leasestore.ErrNoticeNotHeld a notice claimed
// by another owner, or sent already.
func SettleNotice(n *leasestore.Notice, owner string, s leasestore.Settlement, now time.Time) error {
	if n.Owner != owner || n.Sent() {
		return fmt.Errorf("settle notice %q for %q: %w", n.Key, owner, leasestore.ErrNoticeNotHeld)
	}
	n.Owner, n.ClaimedUntil = "", time.Time{}
	for _, id := range s.SentTo {
		if !slices.Contains(n.SentTo, id) && len(n.SentTo) < leasestore.MaxNoticeSinks {
			n.SentTo = append(n.SentTo, id)
		}
	}
	if s.Sent {
		n.SentAt, n.LastError = now, ""
		return nil
	}
	n.NextAt, n.LastError = expiry(now, max(s.RetryIn, 0)), s.Error
	return nil
}

// ByAge orders notices oldest first: by Recorded, then by Key.
func ByAge(a, b leasestore.Notice) int {
	return cmp.Or(a.Recorded.Compare(b.Recorded), cmp.Compare(a.Key, b.Key))
}

// PruneNotices returns the keys of the notices of list a store drops at
// now: those recorded longer than retention ago, and, past limit notices,
// first the sent ones, oldest first, then, only when no sent one is left,
// unsent ones from the jobs with the most of them, oldest first: a flood
// of one job's notices (a worker that puts thousands, a job crashing in a
// loop with no sink) drops its own before any other job's.
func PruneNotices(list []leasestore.Notice, now time.Time, retention time.Duration, limit int) []string {
	var drop []string
	var kept []leasestore.Notice
	for _, n := range list {
		if now.Sub(n.Recorded) > retention {
			drop = append(drop, n.Key)
			continue
		}
		kept = append(kept, n)
	}
	if len(kept) <= limit {
		return drop
	}
	// An unsent notice's weight is how many unsent notices its job still
	// has when it is its job's oldest: dropping by weight, heaviest first,
	// is dropping, each time, the oldest of the job with the most.
	slices.SortFunc(kept, ByAge)
	unsent := map[string]int{}
	for _, n := range kept {
		if !n.Sent() {
			unsent[n.Job]++
		}
	}
	weight := make(map[string]int, len(kept))
	for _, n := range kept {
		if !n.Sent() {
			weight[n.Key] = unsent[n.Job]
			unsent[n.Job]--
		}
	}
	slices.SortStableFunc(kept, func(a, b leasestore.Notice) int {
		if a.Sent() != b.Sent() {
			if a.Sent() {
				return -1
			}
			return 1
		}
		return cmp.Compare(weight[b.Key], weight[a.Key])
	})
	for _, n := range kept[:len(kept)-limit] {
		drop = append(drop, n.Key)
	}
	return drop
}
