package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// The lease rules are package rules'; this file is how the store feeds them
// a job's keys and writes back what they changed.
//
// etcd keeps no expiry times a transaction could compare with: a run is
// live while its liveness key is there (etcd deletes it with its lease),
// and has evidence while its evidence key is there. The rules see such a
// run as live, or as having evidence, for its whole TTL from now, and a run
// whose liveness key is gone as having expired now. Where the time left
// matters to a caller (HeldError.ExpiresIn, Holder.ExpiresAt), the store
// asks etcd for the lease's TTL left instead.

// asRecord is st as the rules read it at now: a run per slot with
// evidence, live while its slot's liveness carries its token.
func (st *jobState) asRecord(at time.Time) *rules.Record {
	rec := new(rules.Record)
	*rec = st.rec.Record
	rec.Job, rec.Runs = st.job, nil
	for _, ss := range st.slots {
		if ev := ss.evd; ev != nil {
			liveUntil := at
			if ss.live != nil && ss.liveToken == ev.Token {
				liveUntil = lasts(at, ev.TTL)
			}
			run := *ev
			run.LiveUntil, run.EvidenceUntil = liveUntil, lasts(at, ev.EvidenceTTL)
			rec.Runs = append(rec.Runs, &run)
		}
		if ss.live != nil && (ss.evd == nil || ss.evd.Token != ss.liveToken) {
			// A liveness key without its run's evidence (written by hand,
			// or left by a run whose evidence another wrote over): the
			// slot is held, by a run known only by its token, until etcd
			// expires the key.
			rec.Runs = append(rec.Runs, &rules.Run{Token: ss.liveToken, Slot: ss.slot, LiveUntil: lasts(at, 0), EvidenceUntil: lasts(at, 0)})
		}
	}
	return rec
}

// slotRun is rec's run of token in slot, as asRecord made it or the rules
// left it; nil when there is none.
func slotRun(rec *rules.Record, slot int, token int64) *rules.Run {
	for _, u := range rec.Runs {
		if u.Slot == slot && u.Token == token {
			return u
		}
	}
	return nil
}

// unchanged reports whether the rules left record b as they found it, a,
// the runs aside (they are the liveness and evidence keys).
func unchanged(a, b rules.Record) bool {
	a.Runs, b.Runs = nil, nil
	return reflect.DeepEqual(a, b)
}

// lasts is the expiry the rules see for a key that is there at at, of a
// lease of ttl: at most ttl from now, and after now even for a key whose
// TTL is unknown (evidence written by hand, or by a leasectl that did not
// record it).
func lasts(at time.Time, ttl time.Duration) time.Time {
	return at.Add(max(ttl, time.Microsecond))
}

// writes are the etcd writes that make st's keys what the rules made of
// rec, which asRecord gave them, with step's events appended to the
// history: the record, the quarantine index, for each run the rules ended
// its liveness and evidence deleted, and for each run they asked to stop
// its evidence rewritten on its etcd lease. A run the rules granted is
// Acquire's to write (it needs etcd leases), and one they renewed Renew's
// (a keep-alive). at is the transition's time, at which a wake-up names
// the waiters whose turn it is. It updates st.rec, and returns the record
// as written, nil when unchanged.
func (s *Store) writes(st *jobState, rec *rules.Record, step rules.Step, at time.Time) ([]requestOp, []byte, error) {
	r := st.rec
	before := r.Record // the rules replace what they change, never write through a pointer
	hadQuarantine := r.Quarantine
	r.Record = *rec
	r.Job, r.Runs = "", nil // the job is the key's; the runs are the liveness and evidence keys
	for _, e := range step.Events {
		r.event(e.At, e)
	}
	r.Turn = nil
	if step.Wake {
		r.Wakes++
		turn := rec.Turn(at)
		if turn == nil {
			turn = []string{}
		}
		r.Turn = &turn
	}
	var ops []requestOp
	for _, ss := range st.slots {
		if ss.evd == nil {
			continue
		}
		u := slotRun(rec, ss.slot, ss.evd.Token)
		switch {
		case u == nil && slices.ContainsFunc(rec.Runs, func(v *rules.Run) bool { return v.Slot == ss.slot }):
			// The slot's crash counted, and the slot granted to a new run,
			// whose keys Acquire writes over these.
		case u == nil:
			ops = append(ops, del(s.slotKey(kindEvidence, st.job, ss.slot)))
			if ss.live != nil {
				ops = append(ops, del(s.slotKey(kindLive, st.job, ss.slot)))
			}
		case u.Stop != ss.evd.Stop:
			stopping := *ss.evd
			stopping.Stop = u.Stop
			put, err := putJSON(s.slotKey(kindEvidence, st.job, ss.slot), &stopping, ss.ev.Lease)
			if err != nil {
				return nil, nil, err
			}
			ops = append(ops, put)
		}
	}
	switch {
	case r.Quarantine == nil && hadQuarantine != nil:
		ops = append(ops, del(s.key(kindQuarantined, st.job)))
	case r.Quarantine != nil && r.Quarantine != hadQuarantine:
		q, err := putJSON(s.key(kindQuarantined, st.job), r.Quarantine, 0)
		if err != nil {
			return nil, nil, err
		}
		ops = append(ops, q)
	}
	due, err := s.dueWrites(st.job, &before, &r.Record)
	if err != nil {
		return nil, nil, err
	}
	ops = append(ops, due...)
	if unchanged(r.Record, before) && len(step.Events) == 0 && !step.Wake {
		return ops, nil, nil
	}
	after, err := json.Marshal(r)
	if err != nil {
		return nil, nil, err
	}
	return append(ops, requestOp{Put: &putRequest{Key: s.key(kindJob, st.job), Value: after}}), after, nil
}

// apply runs a transition of the rules on st at this host's clock, and
// returns its writes and the transition's refusal.
func (s *Store) apply(st *jobState, transition func(r *rules.Record, at time.Time) (rules.Step, error)) ([]requestOp, error) {
	at := now()
	rec := st.asRecord(at)
	step, refusal := transition(rec, at)
	ops, _, err := s.writes(st, rec, step, at)
	if err != nil {
		return nil, err
	}
	return ops, refusal
}

// heldRefusal fixes up a refusal of the rules for a live lease: it names
// the holder whose lease expires first by etcd's count of each lease's TTL
// left (whole seconds, so of two within a second of each other, the one in
// the lower slot), with that TTL left. asRecord cannot tell: it sees every
// live run as live for its whole TTL from now.
func (s *Store) heldRefusal(ctx context.Context, st *jobState, err error) error {
	var held *leasestore.HeldError
	if !errors.As(err, &held) || held.Holder == "" {
		return err
	}
	var first *slotState
	for _, ss := range st.slots {
		if ss.live == nil || ss.evd == nil || ss.liveToken != ss.evd.Token {
			continue
		}
		if left := s.ttlLeft(ctx, ss.live.Lease); first == nil || left < held.ExpiresIn {
			first, held.ExpiresIn = ss, left
		}
	}
	if first != nil {
		ev := first.evd
		held.Holder, held.Host, held.PID, held.Token, held.Since = ev.Holder, ev.Host, ev.PID, ev.Token, ev.Started
	}
	return err
}
