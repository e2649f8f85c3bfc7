package etcdstore

import (
	"bytes"
	"context"
)

// The compare-and-swap machinery every transition goes through: read a
// job's keys in one revision, write if none of them changed since, and
// start again on the fresh state otherwise.

// read reads the per-job keys of jobs in one revision.
func (s *Store) read(ctx context.Context, op string, jobs ...string) ([]*jobState, error) {
	var ops []requestOp
	for _, job := range jobs {
		ops = append(ops, s.readOps(job)...)
	}
	var resp txnResponse
	if err := s.c.call(ctx, "/v3/kv/txn", txnRequest{Success: ops}, &resp); err != nil {
		return nil, s.unavailable(op, err)
	}
	states, err := s.parseStates(jobs, resp.Responses, resp.Header.Revision)
	if err != nil {
		return nil, s.unavailable(op, err)
	}
	return states, nil
}

// commit writes ops if none of the keys of states changed since they were
// read. When one did, it returns false with the jobs' fresh states, read
// in the same round trip.
func (s *Store) commit(ctx context.Context, op string, states []*jobState, ops []requestOp) (bool, []*jobState, error) {
	ok, fresh, _, err := s.commitAt(ctx, op, states, ops)
	return ok, fresh, err
}

// commitAt is commit that also returns the revision the transaction wrote.
func (s *Store) commitAt(ctx context.Context, op string, states []*jobState, ops []requestOp) (bool, []*jobState, int64, error) {
	req := txnRequest{Success: ops}
	jobs := make([]string, len(states))
	for i, st := range states {
		jobs[i] = st.job
		req.Compare = append(req.Compare, s.guards(st)...)
		req.Failure = append(req.Failure, s.readOps(st.job)...)
	}
	var resp txnResponse
	if err := s.c.call(ctx, "/v3/kv/txn", req, &resp); err != nil {
		return false, nil, 0, s.unavailable(op, err)
	}
	if resp.Succeeded {
		return true, nil, resp.Header.Revision, nil
	}
	fresh, err := s.parseStates(jobs, resp.Responses, resp.Header.Revision)
	if err != nil {
		return false, nil, 0, s.unavailable(op, err)
	}
	if rev, ok := s.landed(ops, fresh); ok {
		return true, nil, rev, nil
	}
	return false, fresh, 0, nil
}

// landed reports whether fresh, the state a transaction of ops found
// changed, is what ops wrote: another copy of the same transaction (the
// client hedges a request over several members) committed first. Every
// key ops put holds its value, with a mod revision of one transaction,
// which it returns; every key ops deleted is gone. A put record carries
// its new history events, stamped to the microsecond, so no other writer's
// state matches one.
func (s *Store) landed(ops []requestOp, fresh []*jobState) (int64, bool) {
	values := map[string]*keyValue{} // every key read, nil for a record that does not exist
	read := func(key []byte) (*keyValue, bool) {
		for _, st := range fresh {
			if bytes.Equal(key, s.key(kindJob, st.job)) {
				return st.doc, true
			}
			for _, kind := range []string{kindLive, kindEvidence} {
				if r := s.slotsRange(kind, st.job); bytes.Compare(key, r.Key) >= 0 && bytes.Compare(key, r.RangeEnd) < 0 {
					return values[string(key)], true
				}
			}
		}
		return nil, false // the quarantine and due indexes, written with the record
	}
	for _, st := range fresh {
		for _, kvs := range [][]keyValue{st.live, st.ev} {
			for i := range kvs {
				values[string(kvs[i].Key)] = &kvs[i]
			}
		}
	}
	var rev int64
	puts := 0
	for _, op := range ops {
		kv, isRead := read(op.key())
		switch {
		case !isRead:
		case op.Put != nil:
			if kv == nil || !bytes.Equal(kv.Value, op.Put.Value) || rev != 0 && kv.ModRevision != rev {
				return 0, false
			}
			rev, puts = kv.ModRevision, puts+1
		case op.Delete != nil:
			if kv != nil {
				return 0, false
			}
		}
	}
	return rev, puts > 0
}

// transact runs decide on job's state and commits the writes it returns;
// when another client wrote the job's keys in between, decide runs again on
// the fresh state. It starts from start, a state remembered from this
// client's own last write (a release then costs no read: the compares catch
// any change since), or else from a read. decide's error (a refusal) is returned once its writes
// are committed.
func (s *Store) transact(ctx context.Context, op, job string, start *jobState, decide func(st *jobState) ([]requestOp, error)) (*jobState, error) {
	st := start
	if st == nil {
		states, err := s.read(ctx, op, job)
		if err != nil {
			return nil, err
		}
		st = states[0]
	}
	for range maxConflicts {
		ops, refusal := decide(st)
		if len(ops) == 0 && st == start {
			// A refusal is only as good as the state it was decided on,
			// and a remembered state may be stale: read it.
			states, err := s.read(ctx, op, job)
			if err != nil {
				return nil, err
			}
			st = states[0]
			continue
		}
		if len(ops) == 0 {
			return st, refusal
		}
		ok, fresh, err := s.commit(ctx, op, []*jobState{st}, ops)
		if err != nil {
			return nil, err
		}
		if ok {
			return st, refusal
		}
		st = fresh[0]
	}
	return nil, s.unavailable(op, errContention)
}
