package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// The model-based test's slots and queue of waiters: one job of several slots and one of one, requests
// that wait at random, waiters that ask again (keeping their place, or
// getting the slot that is theirs) and waiters that give up.

// modelSlots are the jobs' slots, when the store grants as many.
var modelSlots = map[string]int{"alpha": 3, "beta": 1}

// modelWaiter is a request of the sequence that waits in its job's queue.
type modelWaiter struct {
	worker int
	req    leasestore.AcquireRequest
}

// slotsOf is the slots the sequence's runs of job ask for.
func (ls *lockstep) slotsOf(job string) int {
	return min(modelSlots[job], ls.maxSlots)
}

// slotted gives req its job's slots, at times
// another number (which the runs in flight refuse), and, when it may wait,
// a wait one time in three.
func (ls *lockstep) slotted(req *leasestore.AcquireRequest, mayWait bool) {
	req.Slots = ls.slotsOf(req.Job)
	if ls.rnd.IntN(12) == 0 && req.Slots < ls.maxSlots {
		req.Slots++
	}
	req.Wait = mayWait && ls.rnd.IntN(3) == 0
}

// noteWaiter keeps the sequence's waiters as the rules answered req: a
// request that waits and is refused as held waits; one granted, or refused
// otherwise, no longer does.
func (ls *lockstep) noteWaiter(worker int, req leasestore.AcquireRequest, refusal error) {
	waiters := slices.DeleteFunc(ls.waiters[req.Job], func(w modelWaiter) bool { return w.req.Holder == req.Holder })
	if req.Wait && errors.As(refusal, new(*leasestore.HeldError)) {
		waiters = append(waiters, modelWaiter{worker, req})
	}
	ls.waiters[req.Job] = waiters
}

// firstHolder makes the rules' refusal modelErr name the holder the
// store's refusal storeErr names, on a store that cannot tell which of a
// job's live leases expires first (Abilities.CoarseExpiry), when that
// holder's run is live in the model too.
func (ls *lockstep) firstHolder(job string, storeErr, modelErr error) {
	var got, want *leasestore.HeldError
	if !ls.h.CoarseExpiry || !errors.As(storeErr, &got) || !errors.As(modelErr, &want) || want.Holder == "" {
		return
	}
	for _, u := range ls.model[job].rec.LiveRuns(ls.now) {
		if u.Holder == got.Holder && u.Token == ls.tokens[got.Token] {
			want.Holder, want.Token = u.Holder, u.Token
		}
	}
}

// acquireWaiting is a waiter asking again, as it does once per heartbeat
// and when a release wakes it.
func (ls *lockstep) acquireWaiting(t *testing.T, job string) {
	waiters := ls.waiters[job]
	w := waiters[ls.rnd.IntN(len(waiters))]
	ls.acquire(t, w.worker, w.req)
}

// leave is a waiter giving up.
func (ls *lockstep) leave(t *testing.T, job string) {
	waiters := ls.waiters[job]
	i := ls.rnd.IntN(len(waiters))
	w := waiters[i]
	ls.waiters[job] = slices.Delete(slices.Clone(waiters), i, i+1)
	ls.logf("%s: %s leaves the queue", job, w.req.Holder)
	if err := ls.workers[w.worker].Leave(Ctx(t), job, w.req.Holder); err != nil {
		ls.fail(t, "leave", err, "no error")
	}
	m := ls.model[job]
	m.apply(rules.Leave(&m.rec, w.req.Holder, ls.now))
	ls.seen["leave: ok"]++
}

// describeSlots is what a status says of slots and the queue: the slots,
// each holder with its slot, the waiters in order.
func (ls *lockstep) describeSlots(st *leasestore.JobStatus, label func(int64) string) []string {
	var holders []string
	for _, h := range st.Holders {
		holders = append(holders, fmt.Sprintf("%s (%s) in slot %d", h.Worker, label(h.Token), h.Slot))
	}
	return []string{
		fmt.Sprintf("%d slots, held by %s", st.Slots, strings.Join(holders, ", ")),
		"queue: " + strings.Join(waitersOf(st.Queue), ", "),
	}
}
