package redisstore

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// The views of the store: one job's status, the live leases, the gauges
// and a token's check, each read by one read-only script (lua/status.lua,
// leases.lua, counts.lua, checktoken.lua), one lease per live run.

// field is the record field name of the run in slot (lua/runs.lua, fld):
// the name itself for slot 0, as a leasectl older than slots wrote it.
func field(name string, slot int) string {
	if slot == 0 {
		return name
	}
	return name + strconv.Itoa(slot)
}

// Status reports job's state, holders, queue, counters and history; see
// Store.
func (s *Store) Status(ctx context.Context, job string) (*leasestore.JobStatus, error) {
	v, err := s.run(ctx, "status", scriptStatus, s.jobKeys(job), s.jobPrefix(job), job)
	if err != nil {
		return nil, err
	}
	r := &reply{op: "status", v: v}
	now := r.time(0)
	rec := r.record(2)
	st := &leasestore.JobStatus{
		Job: job, State: leasestore.StateIdle, Now: now, Region: rec["g"],
		LastToken: rec.int("t"), Attempts: rec.int("a"), Crashes: int(rec.int("c")), MaxCrashes: int(rec.int("m")),
		LastSuccess: rec.time("s"), History: r.history(3), Expect: rec.expectation(),
		Slots: max(int(rec.int("n")), 1), Queue: r.queue(4, now),
	}
	if rec["q"] != "" {
		st.State = leasestore.StateQuarantined
		st.Quarantine = &leasestore.Quarantine{
			Job: job, Since: rec.time("q"), Reason: rec["qr"], By: rec["qb"], Crashes: int(rec.int("qc")),
			LastHolder: rec.either("ql", "lh"), LastHost: rec.either("qo", "lo"),
		}
	}
	if rec["o"] != "" {
		st.LastOutcome = &leasestore.LastOutcome{
			Outcome: leasestore.Outcome{
				Result: leasestore.Result(rec["o"]), ExitCode: int(rec.int("oe")), Signal: int(rec.int("og")),
				Duration: time.Duration(rec.int("od")), Reason: rec["or"],
			},
			Worker: rec["ow"], Token: rec.int("ot"), FinishedAt: rec.time("of"),
		}
	}
	var crashed *leasestore.Crash
	for _, u := range r.runs(1) {
		if !u.expiry.After(now) {
			if crashed == nil {
				crashed = u.ev.crash(job, u.expiry, now, st.Crashes+1, false)
			}
			continue
		}
		h := u.ev.holder(job, u.expiry)
		h.Slot = u.slot
		h.LastRTT = time.Duration(rec.int(field("rt", u.slot))) * time.Microsecond
		if rec[field("sp", u.slot)] == strconv.FormatInt(u.ev.token, 10) {
			h.Stop = &leasestore.StopRequest{By: rec[field("sb", u.slot)], Reason: rec[field("sr", u.slot)],
				At: rec.time(field("sa", u.slot))}
		}
		st.Holders = append(st.Holders, *h)
	}
	switch {
	case len(st.Holders) > 0:
		st.Holder = &st.Holders[0]
		if st.State == leasestore.StateIdle {
			st.State = leasestore.StateRunning
		}
	case crashed != nil:
		// Reported on a quarantined job too: its evidence is there, and
		// the next acquire after the release counts it.
		st.Crashed = crashed
		if st.State == leasestore.StateIdle {
			st.State = leasestore.StateCrashed
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	return st, nil
}

// Leases lists the live leases of every shard, one per live run, ordered
// by job and slot.
func (s *Store) Leases(ctx context.Context) ([]leasestore.Holder, error) {
	replies, err := s.runShards(ctx, "list leases", scriptLeases, allShards())
	if err != nil {
		return nil, err
	}
	var list []leasestore.Holder
	for _, r := range replies {
		for i := 1; i+7 < r.len() && r.err == nil; i += 8 {
			h := r.evidence(i+2).holder(r.str(i), r.time(i+3))
			h.Slot = int(r.int(i + 1))
			h.ReadAt = r.time(0)
			h.LastRTT = time.Duration(r.int(i+4)) * time.Microsecond
			if by := r.str(i + 5); by != "" {
				h.Stop = &leasestore.StopRequest{By: by, Reason: r.str(i + 6), At: r.time(i + 7)}
			}
			list = append(list, *h)
		}
		if r.err != nil {
			return nil, r.err
		}
	}
	slices.SortFunc(list, func(a, b leasestore.Holder) int {
		return cmp.Or(strings.Compare(a.Job, b.Job), cmp.Compare(a.Slot, b.Slot))
	})
	return list, nil
}

// Counts returns the number of jobs with a live run and of quarantined
// jobs, summed over the shards.
func (s *Store) Counts(ctx context.Context) (leasestore.Counts, error) {
	replies, err := s.runShards(ctx, "count", scriptCounts, allShards())
	if err != nil {
		return leasestore.Counts{}, err
	}
	var c leasestore.Counts
	for _, r := range replies {
		c.InFlight += int(r.int(0))
		c.Quarantined += int(r.int(1))
		if r.err != nil {
			return leasestore.Counts{}, r.err
		}
	}
	return c, nil
}

// CheckToken returns nil when token is a current fencing token of job: the
// last one granted while its run is live, or, for a job of several slots,
// any live run's; see Store.
func (s *Store) CheckToken(ctx context.Context, job string, token int64) error {
	v, err := s.run(ctx, "check token", scriptCheckToken, s.jobKeys(job), s.jobPrefix(job), job, token)
	if err != nil {
		return err
	}
	r := &reply{op: "check token", v: v}
	current, live, mine, slots := r.int(0), r.int(1) == 1, r.int(2) == 1, r.int(3)
	if r.err != nil {
		return r.err
	}
	if mine && (token == current || slots > 1) {
		return nil
	}
	return &leasestore.StaleTokenError{Job: job, Token: token, Current: current, Live: live}
}
