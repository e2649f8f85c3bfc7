package etcdstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

const (
	// minTTL is the shortest lease TTL the store honours: etcd's minimum
	// lease TTL with its default timing (1.5 election timeouts of 1 s,
	// rounded up to whole seconds). etcd silently lengthens a shorter one.
	minTTL = 2 * time.Second
	// maxTTL is etcd's longest lease TTL (9,000,000,000 s).
	maxTTL = 9_000_000_000 * time.Second

	// batchJobs is how many jobs one transaction reads or writes: three
	// compares and at most three operations each stay within etcd's
	// default --max-txn-ops of 128.
	batchJobs = 40

	// maxConflicts bounds how often an operation starts again because
	// another client wrote the job's keys between its read and its write;
	// each retry comes at once, with the fresh state the failed transaction
	// returned, so only a pathological storm reaches it.
	maxConflicts = 64

	// leaseLookups is how many lease TTL look-ups Leases makes at once.
	leaseLookups = 8
)

// Store is the leasestore.Store kept in etcd, shared by many hosts. Every
// transition is one etcd transaction guarded by the mod revisions of the
// keys it read; liveness and evidence are keys attached to etcd leases.
type Store struct {
	c        *client
	ns       string
	addr     string // the endpoints, for messages
	password string // only to scrub it from messages

	mu      sync.Mutex
	held    map[string]heldRun   // job → the run this client acquired last
	written map[string]*jobState // job → what this client's Acquire wrote

	// The token feed (tokenfeed.go), its hub made with the Store.
	feed *tokenSource
}

// heldRun is what Renew needs of a run this client acquired: the etcd
// leases of its liveness and evidence.
type heldRun struct {
	holder         string
	token          int64
	live, evidence int64
}

var (
	_ leasestore.Store      = (*Store)(nil)
	_ leasestore.TTLLimiter = (*Store)(nil)
)

// TTLRange returns the lease TTLs the store honours: from etcd's default
// minimum lease TTL (2 s) to its maximum. TTLs are rounded up to whole
// seconds.
func (s *Store) TTLRange() (min, max time.Duration) { return minTTL, maxTTL }

// Close stops the token watches and closes the idle connections;
// Subscribe's watches close with their subscriptions.
func (s *Store) Close() error {
	s.feed.hub.Close()
	s.c.close()
	return nil
}

// now is the store's clock: etcd has none, so it is this host's, at the
// microsecond resolution of the tokens.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// seconds is d as an etcd lease TTL: whole seconds, rounded up.
func seconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// Acquire grants the lease on req.Job; see leasestore.Leaser. It reads the
// job's keys, grants the run's two etcd leases (liveness and evidence) when
// the job is free, and writes liveness, evidence and record in one
// transaction guarded by the revisions it read. The store is no
// leasestore.Queuer: it grants one run per job and keeps no queue of
// waiters, so it asks the rules for one slot and no place in a queue,
// whatever req says.
func (s *Store) Acquire(ctx context.Context, req leasestore.AcquireRequest) (*leasestore.Lease, error) {
	req.Slots, req.Wait = 1, false
	states, err := s.read(ctx, "acquire", req.Job)
	if err != nil {
		return nil, err
	}
	st := states[0]
	var live, evid int64  // the etcd leases for this request, once chosen
	var newLeases []int64 // those of them granted for it
	// granted: a grant with them committed. inDoubt: a commit with them
	// got no answer, and may have committed all the same: the job's record
	// then names them, and the next run reuses them while they live, so
	// revoking them could end that run's liveness. They are left to expire.
	granted, inDoubt := false, false
	defer func() {
		if !granted && !inDoubt {
			for _, id := range newLeases {
				s.revoke(ctx, id)
			}
		}
	}()
	for range maxConflicts {
		at := now()
		rec := st.asRecord(at)
		before := oneRun(rec)
		step, lease, refusal := rules.Acquire(rec, req, at)
		if refusal != nil {
			ops, _, err := s.writes(st, rec, step)
			if err != nil {
				return nil, s.unavailable("acquire", err)
			}
			if len(ops) == 0 {
				return nil, s.heldRefusal(ctx, st, refusal)
			}
			// A crash counted (and maybe a quarantine) even though the
			// request is refused.
			ok, fresh, err := s.commit(ctx, "acquire", []*jobState{st}, ops)
			if err != nil {
				return nil, err
			}
			if !ok {
				st = fresh[0]
				continue
			}
			return nil, refusal
		}
		if before != nil && lease.Token == before.Token {
			// Asked again by the holder of the live lease: the same lease,
			// renewed as Renew would.
			ttls, err := s.keepAlive(ctx, "acquire", st.live.Lease, st.ev.Lease)
			if err != nil {
				return nil, err
			}
			if ttls[0] > 0 {
				// The lease may be this call's own grant, committed by a
				// copy of its transaction whose answer came after another
				// copy's refusal (the client hedges): its etcd leases are in
				// use, and revoking them would end the run it just granted.
				granted = slices.Contains(newLeases, st.live.Lease) || slices.Contains(newLeases, st.ev.Lease)
				s.remember(req.Job, heldRun{req.Holder, lease.Token, st.live.Lease, st.ev.Lease})
				return lease, nil
			}
			if states, err = s.read(ctx, "acquire", req.Job); err != nil {
				return nil, err
			}
			st = states[0]
			continue
		}
		if live == 0 {
			if live, evid, newLeases, err = s.leases(ctx, req.TTL, req.EvidenceTTL, st.rec); err != nil {
				return nil, err
			}
		}
		st.rec.LiveLease, st.rec.EvidenceLease = live, evid
		ops, recValue, err := s.writes(st, rec, step)
		if err != nil {
			return nil, s.unavailable("acquire", err)
		}
		u := oneRun(rec)
		ev := *u
		ev.LiveUntil, ev.EvidenceUntil = time.Time{}, time.Time{} // the keys' etcd leases keep them
		evOp, err := putJSON(s.key(kindEvidence, req.Job), &ev, evid)
		if err != nil {
			return nil, s.unavailable("acquire", err)
		}
		liveOp := requestOp{Put: &putRequest{Key: s.key(kindLive, req.Job), Value: []byte(strconv.FormatInt(u.Token, 10)), Lease: live}}
		ok, fresh, rev, err := s.commitAt(ctx, "acquire", []*jobState{st}, append(ops, liveOp, evOp))
		if err != nil {
			inDoubt = true
			return nil, err
		}
		if !ok {
			st = fresh[0]
			continue
		}
		granted = true
		written, err := parseStates([]string{req.Job}, []responseOp{
			answerOf(&keyValue{Value: liveOp.Put.Value, ModRevision: rev, Lease: live}),
			answerOf(&keyValue{Value: evOp.Put.Value, ModRevision: rev, Lease: evid}),
			answerOf(&keyValue{Value: recValue, ModRevision: rev}),
		})
		if err == nil {
			s.rememberWritten(written[0])
		}
		s.remember(req.Job, heldRun{req.Holder, u.Token, live, evid})
		return lease, nil
	}
	return nil, s.unavailable("acquire", errContention)
}

// Renew extends l's liveness and evidence; see leasestore.Leaser. It keeps
// both etcd leases alive in one request, then checks that the liveness is
// still l's (renewing a lease whose key someone deleted must not pass for
// holding the job): by reading the job's keys, or, when l.RTT moved past
// rttSlack from the round trip the evidence holds, by writing it there in
// a transaction guarded by the revisions this client last saw of its run.
// Either way a renewal is two requests.
func (s *Store) Renew(ctx context.Context, l *leasestore.Lease) error {
	s.mu.Lock()
	run, ok := s.held[l.Job]
	seen := s.written[l.Job]
	s.mu.Unlock()
	if !ok || run.token != l.Token || run.holder != l.Holder {
		states, err := s.read(ctx, "renew", l.Job)
		if err != nil {
			return err
		}
		st := states[0]
		if st.evd == nil || st.evd.Token != l.Token || st.evd.Holder != l.Holder || st.live == nil || st.liveToken != l.Token {
			return s.leaseLost(ctx, l)
		}
		run, seen = heldRun{l.Holder, l.Token, st.live.Lease, st.ev.Lease}, st
	}
	ttls, err := s.keepAlive(ctx, "renew", run.live, run.evidence)
	if err != nil {
		return err
	}
	if ttls[0] <= 0 {
		return s.leaseLost(ctx, l)
	}
	if seen == nil || !run.owns(seen) || !rttMoved(seen.evd.RTT, l.RTT) {
		states, err := s.read(ctx, "renew", l.Job)
		if err != nil {
			return err
		}
		if !run.owns(states[0]) {
			return s.leaseLost(ctx, l)
		}
		// A round trip this read finds stale is written by the next
		// renewal, from this state: a renewal stays two requests.
		seen = states[0]
	} else if seen, err = s.writeRTT(ctx, l, run, seen); err != nil {
		return err
	}
	s.remember(l.Job, run)
	s.rememberWritten(seen)
	l.Stop = seen.evd.Stop
	return nil
}

// rttSlack is how far the round trip a renewal reports (Lease.RTT) may be
// from the one the run's evidence holds before Renew writes it: 5 ms, or a
// quarter of the held one if that is more. Writing it is an etcd write (a
// consensus round, a disk sync on a quorum, a new revision) in place of the
// read a renewal otherwise makes. The round trip matters against the
// renewal margin, --safety − --heartbeat (ttl/6 by default: 333 ms at
// etcd's shortest TTL), and the supervisor warns at half of it; within the
// slack, what status and ls show judges that margin as well as the exact
// figure, while the jitter of a loaded host (a few ms) writes nothing. A
// tighter slack writes most renewals of a loaded host for digits nobody
// acts on; a looser one hides a round trip that doubled.
const (
	rttSlackFloor = 5 * time.Millisecond
	rttSlackShare = 4 // the held round trip divided by this
)

// rttMoved reports whether Renew writes rtt over held (rttSlack).
func rttMoved(held, rtt time.Duration) bool {
	if rtt <= 0 {
		return false
	}
	d := rtt - held
	if d < 0 {
		d = -d
	}
	return held == 0 || d > max(rttSlackFloor, held/rttSlackShare)
}

// owns reports whether st is the state of run: its liveness on run's etcd
// lease with run's token, and its evidence run's.
func (run heldRun) owns(st *jobState) bool {
	return st.live != nil && st.live.Lease == run.live && st.liveToken == run.token &&
		st.evd != nil && st.evd.Token == run.token && st.evd.Holder == run.holder && st.ev.Lease == run.evidence
}

// writeRTT puts l.RTT into the evidence of run, whose keep-alive just
// succeeded, in a transaction guarded by the revisions of seen, a state of
// the run this client saw: if none of the job's keys changed since, the
// liveness is still l's. It returns the state written.
func (s *Store) writeRTT(ctx context.Context, l *leasestore.Lease, run heldRun, seen *jobState) (*jobState, error) {
	for range maxConflicts {
		ev := *seen.evd
		ev.RTT = l.RTT
		put, err := putJSON(s.key(kindEvidence, l.Job), &ev, run.evidence)
		if err != nil {
			return nil, s.unavailable("renew", err)
		}
		ok, fresh, rev, err := s.commitAt(ctx, "renew", []*jobState{seen}, []requestOp{put})
		if err != nil {
			return nil, err
		}
		if ok {
			written, err := parseStates([]string{l.Job}, []responseOp{
				answerOf(seen.live), answerOf(&keyValue{Value: put.Put.Value, ModRevision: rev, Lease: run.evidence}), answerOf(seen.doc),
			})
			if err != nil {
				return nil, s.unavailable("renew", err)
			}
			return written[0], nil
		}
		if seen = fresh[0]; !run.owns(seen) {
			return nil, s.leaseLost(ctx, l)
		}
		if !rttMoved(seen.evd.RTT, l.RTT) {
			return seen, nil
		}
	}
	return nil, s.unavailable("renew", errContention)
}

// leaseLost answers a renewal of a lease that is no longer live: when the
// run's evidence is still there, a lease-lost event records it.
func (s *Store) leaseLost(ctx context.Context, l *leasestore.Lease) error {
	s.forget(l.Job)
	_, err := s.transact(ctx, "renew", l.Job, nil, func(st *jobState) ([]requestOp, error) {
		return s.apply(st, func(r *rules.Record, at time.Time) (rules.Step, error) {
			if u := oneRun(r); u != nil {
				// The keys may still show the run live, but the keep-alive
				// found its etcd lease gone (or another run holds the job):
				// it expired, and etcd deletes the keys presently.
				expired := *u
				expired.LiveUntil = at
				r.Runs = []*rules.Run{&expired}
			}
			return rules.Renew(r, l, at)
		})
	})
	return asUnavailable("renew", err)
}

// Release ends l with outcome out; see leasestore.Leaser. It deletes the
// liveness and the evidence with the record's update in one transaction.
// It revokes no etcd lease, which would cost a consensus round and a wait
// of its own: the run's liveness lease holds no key any more and expires
// within --ttl, and the job's evidence lease serves its next run.
func (s *Store) Release(ctx context.Context, l *leasestore.Lease, out leasestore.Outcome) error {
	_, err := s.transact(ctx, "release", l.Job, s.lastWritten(l.Job), func(st *jobState) ([]requestOp, error) {
		return s.apply(st, func(r *rules.Record, at time.Time) (rules.Step, error) {
			return rules.Release(r, l, out, at)
		})
	})
	if err != nil {
		return asUnavailable("release", err)
	}
	s.forget(l.Job)
	return nil
}

// asUnavailable wraps an encoding failure of decide as unavailable; store
// errors and refusals pass through.
func asUnavailable(op string, err error) error {
	var ue *leasestore.UnavailableError
	if errors.Is(err, leasestore.ErrLeaseLost) || errors.Is(err, leasestore.ErrNotQuarantined) || errors.Is(err, leasestore.ErrNotRunning) || errors.As(err, &ue) {
		return err
	}
	return &leasestore.UnavailableError{Op: op, Err: err}
}

// Quarantine puts job in quarantine by an operator's decision; see
// leasestore.Operator.
func (s *Store) Quarantine(ctx context.Context, job string, note leasestore.Note) error {
	_, err := s.transact(ctx, "quarantine", job, nil, func(st *jobState) ([]requestOp, error) {
		return s.apply(st, func(r *rules.Record, at time.Time) (rules.Step, error) {
			return rules.Quarantine(r, note, at), nil
		})
	})
	if err != nil {
		return asUnavailable("quarantine", err)
	}
	return nil
}

// ReleaseQuarantine lets job run again and resets its crash count; see
// leasestore.Operator.
func (s *Store) ReleaseQuarantine(ctx context.Context, job string, note leasestore.Note) error {
	_, err := s.transact(ctx, "release quarantine", job, nil, func(st *jobState) ([]requestOp, error) {
		return s.apply(st, func(r *rules.Record, at time.Time) (rules.Step, error) {
			return rules.ReleaseQuarantine(r, note, at)
		})
	})
	if err != nil {
		return asUnavailable("release quarantine", err)
	}
	return nil
}

// Stop asks job's running child to stop; see leasestore.Operator. The
// request is written into the run's evidence, where the holder's next
// renewal reads it.
func (s *Store) Stop(ctx context.Context, job string, note leasestore.Note) error {
	_, err := s.transact(ctx, "stop", job, nil, func(st *jobState) ([]requestOp, error) {
		return s.apply(st, func(r *rules.Record, at time.Time) (rules.Step, error) {
			return rules.Stop(r, note, at)
		})
	})
	if err != nil {
		return asUnavailable("stop", err)
	}
	return nil
}

// Status reports job's state, holder, counters and history; see
// leasestore.Operator. The holder's expiry is etcd's count of its lease's
// TTL left.
func (s *Store) Status(ctx context.Context, job string) (*leasestore.JobStatus, error) {
	states, err := s.read(ctx, "status", job)
	if err != nil {
		return nil, err
	}
	st := states[0]
	at := now()
	js := rules.Status(st.asRecord(at), st.rec.History, at)
	if h := js.Holder; h != nil {
		h.ExpiresAt, h.ReadAt = at.Add(s.ttlLeft(ctx, st.live.Lease)), at
	}
	return js, nil
}

// CheckToken returns nil when token is job's current token and its lease is
// live; see leasestore.Operator.
func (s *Store) CheckToken(ctx context.Context, job string, token int64) error {
	states, err := s.read(ctx, "check token", job)
	if err != nil {
		return err
	}
	at := now()
	return rules.CheckToken(states[0].asRecord(at), token, at)
}
