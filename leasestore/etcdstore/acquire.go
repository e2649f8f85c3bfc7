package etcdstore

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// Acquire grants the lease on req.Job; see leasestore.Leaser. It reads the
// job's keys, and when the rules grant the request a slot, takes the run's
// two etcd leases (liveness and evidence) and writes its liveness,
// evidence and the record in one transaction guarded by the revision it
// read (guards): no key of the job's liveness range was written since, so
// the slot granted is still free and every other slot the rules counted
// free or held is as they counted it, or freed since. A refusal that
// changes the record (a crash counted, a place in the queue of waiters) is
// one such transaction too.
func (s *Store) Acquire(ctx context.Context, req leasestore.AcquireRequest) (*leasestore.Lease, error) {
	states, err := s.read(ctx, "acquire", req.Job)
	if err != nil {
		return nil, err
	}
	st := states[0]
	var g granting
	defer func() { g.revokeUnused(ctx, s) }()
	for range maxConflicts {
		at := now()
		rec := st.asRecord(at)
		step, lease, refusal := rules.Acquire(rec, req, at)
		if refusal != nil {
			ops, _, err := s.writes(st, rec, step, at)
			if err != nil {
				return nil, s.unavailable("acquire", err)
			}
			if len(ops) == 0 {
				return nil, s.heldRefusal(ctx, st, refusal)
			}
			// A crash counted (and maybe a quarantine), or a waiter's place
			// in the queue, even though the request is refused.
			ok, fresh, err := s.commit(ctx, "acquire", []*jobState{st}, ops)
			if err != nil {
				return nil, err
			}
			if !ok {
				st = fresh[0]
				continue
			}
			return nil, s.heldRefusal(ctx, st, refusal)
		}
		if ss := st.slot(lease.Slot); ss != nil && ss.evd != nil && ss.evd.Token == lease.Token {
			// Asked again by the holder of a live lease: the same lease,
			// renewed as Renew would. It may be this call's own grant,
			// committed by a copy of its transaction whose answer came
			// after another copy's refusal (the client hedges): its etcd
			// leases are in use, and revoking them would end the run it
			// granted.
			g.keep = leasePair{ss.live.Lease, ss.ev.Lease}
			ttls, err := s.keepAlive(ctx, "acquire", ss.live.Lease, ss.ev.Lease)
			if err != nil {
				return nil, err
			}
			if ttls[0] > 0 {
				s.remember(req.Job, heldRun{req.Holder, lease.Token, lease.Slot, ss.live.Lease, ss.ev.Lease})
				return lease, nil
			}
			if states, err = s.read(ctx, "acquire", req.Job); err != nil {
				return nil, err
			}
			st = states[0]
			continue
		}
		u := slotRun(rec, lease.Slot, lease.Token)
		pair, err := g.leasesFor(ctx, s, req, st.rec, u.Slot)
		if err != nil {
			return nil, err
		}
		st.rec.setLeases(u.Slot, pair)
		ops, _, err := s.writes(st, rec, step, at)
		if err != nil {
			return nil, s.unavailable("acquire", err)
		}
		ev := *u
		ev.LiveUntil, ev.EvidenceUntil = time.Time{}, time.Time{} // the keys' etcd leases keep them
		evOp, err := putJSON(s.slotKey(kindEvidence, req.Job, u.Slot), &ev, pair.Evidence)
		if err != nil {
			return nil, s.unavailable("acquire", err)
		}
		liveOp := requestOp{Put: &putRequest{Key: s.slotKey(kindLive, req.Job, u.Slot), Value: []byte(strconv.FormatInt(u.Token, 10)), Lease: pair.Live}}
		ops = append(ops, liveOp, evOp)
		ok, fresh, rev, err := s.commitAt(ctx, "acquire", []*jobState{st}, ops)
		if err != nil {
			// The commit may have landed all the same: the job's record
			// then names the leases, and the next run of the slot reuses
			// them while they live, so revoking them could end that run's
			// liveness. They are left to expire.
			g.keep = pair
			return nil, err
		}
		if !ok {
			st = fresh[0]
			continue
		}
		g.keep = pair
		if written, err := s.afterWrite(st, ops, rev); err == nil {
			s.rememberWritten(written, u.Slot)
		}
		s.remember(req.Job, heldRun{req.Holder, u.Token, u.Slot, pair.Live, pair.Evidence})
		return lease, nil
	}
	return nil, s.unavailable("acquire", errContention)
}

// granting is the etcd leases an Acquire took for the run it grants.
type granting struct {
	pair leasePair
	// slot is the slot whose last run's leases pair reuses; -1 when
	// pair was granted for this call alone, which may serve any slot.
	slot int
	// fresh are the leases granted for this call.
	fresh []int64
	// keep is the pair a grant of this call committed, or may have
	// committed: its leases are not revoked.
	keep leasePair
}

// leasesFor returns the etcd leases of a new run in slot: those taken
// already when they may serve it, else the slot's own from its previous
// runs, kept alive, when they are still alive with the TTLs asked for,
// else new ones. A slot's leases serve that slot only: a run's liveness
// never rides on the etcd lease another live run keeps alive.
func (g *granting) leasesFor(ctx context.Context, s *Store, req leasestore.AcquireRequest, r *record, slot int) (leasePair, error) {
	if g.pair.Live != 0 && (g.slot == slot || g.slot < 0) {
		return g.pair, nil
	}
	prev := r.leasesOf(slot)
	pair, fresh, err := s.leases(ctx, req.TTL, req.EvidenceTTL, prev)
	if err != nil {
		return leasePair{}, err
	}
	g.pair, g.slot = pair, slot
	if pair.Live != prev.Live && pair.Evidence != prev.Evidence {
		g.slot = -1
	}
	g.fresh = append(g.fresh, fresh...)
	return pair, nil
}

// revokeUnused revokes the leases granted for the call that no grant of it
// committed, or may have.
func (g *granting) revokeUnused(ctx context.Context, s *Store) {
	for _, id := range g.fresh {
		if !slices.Contains([]int64{g.keep.Live, g.keep.Evidence}, id) {
			s.revoke(ctx, id)
		}
	}
}
