package etcdstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// The etcd leases that liveness and evidence are attached to, and what this
// client remembers of the runs it acquired.

// ttlLeft is how long etcd keeps lease id alive without a renewal: its
// whole seconds left plus the second they were truncated from, never more
// than its TTL. 0 when it is gone or cannot be read: a waiter then tries
// again at once, and its watch wakes it anyway when the liveness goes.
func (s *Store) ttlLeft(ctx context.Context, id int64) time.Duration {
	var resp leaseResponse
	if err := s.c.call(ctx, "/v3/lease/timetolive", leaseIDRequest{ID: id}, &resp); err != nil || resp.TTL < 0 {
		return 0
	}
	return time.Duration(min(resp.TTL+1, resp.GrantedTTL)) * time.Second
}

// leases returns the etcd leases of a new run's liveness and evidence: a
// slot's own from its previous runs (prev), kept alive, when they are
// still alive with the TTLs asked for, else new ones (fresh lists those).
// Keeping a lease alive needs no consensus round; granting one does, so a
// slot that runs again within --ttl of its last release costs no grant at
// all.
func (s *Store) leases(ctx context.Context, ttl, evidenceTTL time.Duration, prev leasePair) (pair leasePair, fresh []int64, err error) {
	ids := [2]int64{prev.Live, prev.Evidence}
	ttls := [2]int64{seconds(ttl), seconds(evidenceTTL)}
	var reuse []int64
	var slots []int // the index in ids of each lease in reuse
	for i, id := range ids {
		if id != 0 {
			reuse, slots = append(reuse, id), append(slots, i)
		}
	}
	if len(reuse) > 0 {
		left, err := s.keepAlive(ctx, "acquire", reuse...)
		if err != nil {
			return leasePair{}, nil, err
		}
		for j, i := range slots {
			if left[j] != ttls[i] {
				ids[i] = 0
			}
		}
	}
	var wg sync.WaitGroup
	var errs [2]error
	var granted [2]bool
	for i := range ids {
		if ids[i] == 0 {
			granted[i] = true
			wg.Go(func() { ids[i], errs[i] = s.grantOne(ctx, time.Duration(ttls[i])*time.Second) })
		}
	}
	wg.Wait()
	for i, id := range ids {
		if granted[i] && id != 0 {
			fresh = append(fresh, id)
		}
	}
	if err := errors.Join(errs[0], errs[1]); err != nil {
		for _, id := range fresh {
			s.revoke(ctx, id)
		}
		return leasePair{}, nil, s.unavailable("acquire", err)
	}
	return leasePair{ids[0], ids[1]}, fresh, nil
}

func (s *Store) grantOne(ctx context.Context, ttl time.Duration) (int64, error) {
	var resp leaseResponse
	if err := s.c.call(ctx, "/v3/lease/grant", leaseGrantRequest{TTL: seconds(ttl)}, &resp); err != nil {
		return 0, err
	}
	if resp.Error != "" || resp.ID == 0 {
		return 0, fmt.Errorf("lease grant refused: %s", resp.Error)
	}
	return resp.ID, nil
}

// revoke ends the etcd lease id that a refused Acquire granted, best
// effort: a lease that holds no key only costs etcd memory until it expires
// on its own.
func (s *Store) revoke(ctx context.Context, id int64) {
	if id != 0 {
		_ = s.c.call(ctx, "/v3/lease/revoke", leaseIDRequest{ID: id}, nil)
	}
}

// keepAlive renews the etcd leases ids in one request and returns the TTL
// each has now, in seconds: 0 for a lease that expired or was revoked.
func (s *Store) keepAlive(ctx context.Context, op string, ids ...int64) ([]int64, error) {
	var body []byte
	for _, id := range ids {
		b, err := json.Marshal(leaseIDRequest{ID: id})
		if err != nil {
			return nil, err
		}
		body = append(body, b...)
	}
	answer, err := s.c.exchange(ctx, "/v3/lease/keepalive", body)
	if err != nil {
		return nil, s.unavailable(op, err)
	}
	dec := json.NewDecoder(bytes.NewReader(answer))
	ttls := make([]int64, len(ids))
	for i := range ids {
		var msg struct {
			Result *leaseResponse `json:"result"`
			Error  *etcdError     `json:"error"`
		}
		if err := dec.Decode(&msg); err != nil {
			return nil, s.unavailable(op, fmt.Errorf("keep-alive answer: %w", err))
		}
		if msg.Error != nil {
			return nil, s.unavailable(op, msg.Error)
		}
		if msg.Result == nil || msg.Result.ID != ids[i] {
			return nil, s.unavailable(op, errors.New("keep-alive answered for another lease"))
		}
		ttls[i] = msg.Result.TTL
	}
	return ttls, nil
}

// runKey names a run this client acquired: its job and slot.
type runKey struct {
	job  string
	slot int
}

// remember keeps the leases of the run this client acquired, for Renew.
func (s *Store) remember(job string, r heldRun) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = map[runKey]heldRun{}
	}
	s.held[runKey{job, r.slot}] = r
}

func (s *Store) forget(job string, slot int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, runKey{job, slot})
	delete(s.written, runKey{job, slot})
}

// rememberWritten keeps the state this client's Acquire (or Renew) wrote
// for its run in slot, from which the run's Release starts: its
// transaction's compares catch any change made since, and then return the
// fresh state.
func (s *Store) rememberWritten(st *jobState, slot int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written == nil {
		s.written = map[runKey]*jobState{}
	}
	s.written[runKey{st.job, slot}] = st
}

// lastWritten takes the state remembered for job's slot, if any: it serves
// one operation.
func (s *Store) lastWritten(job string, slot int) *jobState {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := runKey{job, slot}
	st := s.written[k]
	delete(s.written, k)
	return st
}
