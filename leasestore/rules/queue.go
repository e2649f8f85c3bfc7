package rules

import (
	"slices"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// The queue of a job's waiters (AcquireRequest.Wait): a refused request that
// waits joins it at the tail, and keeps its place alive by asking again
// within its TTL (the supervisor asks once per heartbeat while it waits, and
// at once when a release wakes it; its place moves on once it has half its
// TTL left); a free slot goes only to a request
// with fewer waiters ahead of it than there are free slots. A waiter that
// dies lapses once its TTL passed, as a lease would; one that gives up
// leaves (Leave).

// prune drops the waiters that lapsed at now.
func (r *Record) prune(now time.Time) {
	if slices.ContainsFunc(r.Queue, func(w leasestore.Waiter) bool { return !now.Before(w.Until) }) {
		r.Queue = slices.DeleteFunc(slices.Clone(r.Queue), func(w leasestore.Waiter) bool { return !now.Before(w.Until) })
	}
	if len(r.Queue) == 0 {
		r.Queue = nil
	}
}

// ahead is how many waiters come before holder: its place in the queue, or
// the whole queue when it is not in it.
func (r *Record) ahead(holder string) int {
	if i := slices.IndexFunc(r.Queue, func(w leasestore.Waiter) bool { return w.Worker == holder }); i >= 0 {
		return i
	}
	return len(r.Queue)
}

// wait puts req's holder in the queue at now, at the tail, or, once its
// place has at most half its TTL left, keeps it alive for another TTL, and
// returns its position, from 1. With more left its place stands as it is:
// every waiter asks once per heartbeat, and each ask would otherwise be a
// write of the job's record, one per waiter per heartbeat.
func (r *Record) wait(req leasestore.AcquireRequest, now time.Time) int {
	until := expiry(now, req.TTL)
	if i := r.ahead(req.Holder); i < len(r.Queue) {
		if r.Queue[i].Until.Sub(now) <= req.TTL/2 {
			r.Queue = slices.Clone(r.Queue)
			r.Queue[i].Until = until
		}
		return i + 1
	}
	r.Queue = append(slices.Clone(r.Queue), leasestore.Waiter{Worker: req.Holder, Host: req.Host, PID: req.PID, Since: now, Until: until})
	return len(r.Queue)
}

// unqueue takes holder out of the queue, and reports whether it was in it.
func (r *Record) unqueue(holder string) bool {
	i := r.ahead(holder)
	if i == len(r.Queue) {
		return false
	}
	r.Queue = slices.Delete(slices.Clone(r.Queue), i, i+1)
	if len(r.Queue) == 0 {
		r.Queue = nil
	}
	return true
}

// Leave takes holder out of the job's queue at now, when it gives up
// waiting. When it leaves while a slot is free, the waiters are woken: the
// slot may now be the next one's.
func Leave(r *Record, holder string, now time.Time) Step {
	var s Step
	r.leave(&s, holder, now)
	r.prune(now)
	return s
}

// leave takes holder out of the queue at now (Leave, a refusal, a grant
// given up on); when it was in it while a slot is free, s wakes the
// waiters: the slot may now be the next one's.
func (r *Record) leave(s *Step, holder string, now time.Time) {
	if r.unqueue(holder) && len(r.LiveRuns(now)) < r.slots() {
		s.Wake = true
	}
}

// Turn is the waiters whose turn it is at now: the first of the queue that
// have not lapsed, as many as slots are free. A store that wakes waiters in
// their turn wakes these on a Step's Wake; those behind them could not be
// granted a slot (Acquire), so a wake-up would only cost them a refusal.
func (r *Record) Turn(now time.Time) []string {
	return leasestore.Turn(r.waiting(now), r.slots()-len(r.LiveRuns(now)))
}

// waiting is what Status shows of the queue at now: the waiters that have
// not lapsed, oldest first.
func (r *Record) waiting(now time.Time) []leasestore.Waiter {
	var q []leasestore.Waiter
	for _, w := range r.Queue {
		if now.Before(w.Until) {
			q = append(q, w)
		}
	}
	return q
}
