package etcdstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The slots of a job (leasestore.AcquireRequest.Slots): each run in flight
// has a liveness and an evidence key of its own, on etcd leases of its
// own. Slot 0's keys are the job's (<ns>#live/<job>, <ns>#ev/<job>), those
// of slot n ≥ 1 carry the suffix #n. A job ID is made of A-Z a-z 0-9 and
// . _ - : / @ + =, all of them above '$' ('#' + 1), so the keys from the
// job's own up to it followed by '$' are exactly those of its slots: one
// range read gets them all, and one range compare guards them.

// maxSlots is the most slots the store grants a job: a transition is one
// transaction, which deletes the liveness and evidence of every run whose
// crash it counts and compares every evidence key it read, within etcd's
// default --max-txn-ops of 128.
const maxSlots = 32

// slotKey is the key of kind of job's slot.
func (s *Store) slotKey(kind, job string, slot int) []byte {
	k := s.key(kind, job)
	if slot > 0 {
		k = strconv.AppendInt(append(k, '#'), int64(slot), 10)
	}
	return k
}

// slotsRange reads the keys of kind of every slot of job.
func (s *Store) slotsRange(kind, job string) *rangeRequest {
	k := s.key(kind, job)
	return &rangeRequest{Key: k, RangeEnd: append(s.key(kind, job), '$')}
}

// jobSlot is the job and the slot of a liveness or evidence key of kind.
func (s *Store) jobSlot(kind string, key []byte) (job string, slot int, err error) {
	job, n, suffixed := strings.Cut(s.jobOf(kind, key), "#")
	if !suffixed {
		return job, 0, nil
	}
	slot, err = strconv.Atoi(n)
	if err != nil || slot < 1 || strconv.Itoa(slot) != n {
		return "", 0, fmt.Errorf("key %q is not leasectl's", key)
	}
	return job, slot, nil
}

// parseSlots reads st's liveness and evidence keys into its slots, by
// slot.
func (s *Store) parseSlots(st *jobState) error {
	slotOf := func(kind string, kv *keyValue) (*slotState, error) {
		_, n, err := s.jobSlot(kind, kv.Key)
		if err != nil {
			return nil, err
		}
		if ss := st.slot(n); ss != nil {
			return ss, nil
		}
		ss := &slotState{slot: n}
		st.slots = append(st.slots, ss)
		return ss, nil
	}
	for i := range st.live {
		ss, err := slotOf(kindLive, &st.live[i])
		if err != nil {
			return err
		}
		ss.live = &st.live[i]
		ss.liveToken, _ = strconv.ParseInt(string(ss.live.Value), 10, 64)
	}
	for i := range st.ev {
		ss, err := slotOf(kindEvidence, &st.ev[i])
		if err != nil {
			return err
		}
		ss.ev, ss.evd = &st.ev[i], &evidence{}
		if err := json.Unmarshal(ss.ev.Value, ss.evd); err != nil {
			return fmt.Errorf("evidence of job %q is not leasectl's: %w", st.job, err)
		}
		ss.evd.Slot = ss.slot // the key says which slot, whoever wrote the value
	}
	slices.SortFunc(st.slots, func(a, b *slotState) int { return a.slot - b.slot })
	return nil
}

// afterWrite is st as ops, committed at revision rev, left it: the state a
// transaction of this client wrote, from which its next one can start
// without a read (its guards catch any change since).
func (s *Store) afterWrite(st *jobState, ops []requestOp, rev int64) (*jobState, error) {
	live, ev := slices.Clone(st.live), slices.Clone(st.ev)
	var doc *keyValue
	if st.doc != nil {
		d := *st.doc
		doc = &d
	}
	within := func(kind string, key []byte) bool {
		base := s.key(kind, st.job)
		return bytes.HasPrefix(key, base) && (len(key) == len(base) || key[len(base)] == '#')
	}
	apply := func(kvs []keyValue, op requestOp) []keyValue {
		if op.Put != nil {
			kvs = slices.DeleteFunc(kvs, func(kv keyValue) bool { return bytes.Equal(kv.Key, op.Put.Key) })
			kvs = append(kvs, keyValue{Key: op.Put.Key, Value: op.Put.Value, ModRevision: rev, Lease: op.Put.Lease})
			slices.SortFunc(kvs, func(a, b keyValue) int { return bytes.Compare(a.Key, b.Key) })
			return kvs
		}
		return slices.DeleteFunc(kvs, func(kv keyValue) bool { return bytes.Equal(kv.Key, op.Delete.Key) })
	}
	for _, op := range ops {
		key := op.key()
		switch {
		case key == nil:
		case within(kindLive, key):
			live = apply(live, op)
		case within(kindEvidence, key):
			ev = apply(ev, op)
		case bytes.Equal(key, s.key(kindJob, st.job)):
			doc = nil
			if op.Put != nil {
				doc = &keyValue{Key: key, Value: op.Put.Value, ModRevision: rev}
			}
		}
	}
	var docs []keyValue
	if doc != nil {
		docs = []keyValue{*doc}
	}
	states, err := s.parseStates([]string{st.job}, []responseOp{
		{Range: &rangeResponse{KVs: live}}, {Range: &rangeResponse{KVs: ev}}, {Range: &rangeResponse{KVs: docs}},
	}, rev)
	if err != nil {
		return nil, err
	}
	return states[0], nil
}

// key is the key op writes; nil for a read.
func (op requestOp) key() []byte {
	switch {
	case op.Put != nil:
		return op.Put.Key
	case op.Delete != nil:
		return op.Delete.Key
	}
	return nil
}
