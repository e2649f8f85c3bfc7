package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// jobOf returns the job of a key of kind.
func (s *Store) jobOf(kind string, key []byte) string {
	return strings.TrimPrefix(string(key), string(s.prefix(kind)))
}

// Scan counts the crashes of runs whose liveness expired; see
// leasestore.Operator. Its reads follow the runs that ended since the last
// scan, not the runs in flight: each scan leaves a mark, the key
// <ns>#live. holding the revision it covered, and the next one deletes the
// mark and asks etcd to replay, from that revision on, the deletions of
// liveness keys (a watch from a past revision), up to the mark's deletion.
// Each liveness deleted in between (a release, or a lease that expired) is
// a suspect; those whose evidence is still there are crashes, counted in
// transactions of up to batchJobs jobs (scanParallel at a time), each
// guarded by the revisions it read, so a crash Acquire or another Scan counted meanwhile is not
// counted again. Without a mark (the first scan, one that failed half-way)
// or when etcd compacted the revisions since, Scan reads the keys of every
// evidence and liveness instead. On an error it also returns the crashes
// counted before.
func (s *Store) Scan(ctx context.Context) ([]leasestore.Crash, error) {
	suspects, through, err := s.endedSinceLastScan(ctx)
	if err != nil {
		return nil, err
	}
	var (
		mu      sync.Mutex
		crashes []leasestore.Crash
		errs    []error
		wg      sync.WaitGroup
	)
	sem := make(chan struct{}, scanParallel)
	for len(suspects) > 0 {
		n := min(batchJobs, len(suspects))
		batch := suspects[:n]
		suspects = suspects[n:]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			found, err := s.countCrashes(ctx, batch)
			mu.Lock()
			defer mu.Unlock()
			crashes = append(crashes, found...)
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return crashes, errs[0]
	}
	mark := requestOp{Put: &putRequest{Key: s.markKey(), Value: []byte(strconv.FormatInt(through, 10))}}
	if err := s.c.call(ctx, "/v3/kv/txn", txnRequest{Success: []requestOp{mark}}, nil); err != nil {
		return crashes, s.unavailable("scan", err)
	}
	return crashes, nil
}

// scanParallel is how many transactions counting crashes a scan has in
// flight at once: etcd commits concurrent transactions together, in one
// disk sync, so a thousand crashes cost a few syncs rather than 25.
const scanParallel = 4

// markKey is the key of the scan's mark. It sorts just before the
// liveness keys, so one watch range covers the mark and them.
func (s *Store) markKey() []byte { return []byte(s.ns + "#" + kindLive + ".") }

// endedSinceLastScan returns the jobs whose liveness was deleted since the
// last scan's mark, and the revision they run through; or, without a usable
// mark, every job with evidence and no liveness, and the revision of that
// read.
func (s *Store) endedSinceLastScan(ctx context.Context) ([]string, int64, error) {
	var resp txnResponse
	take := txnRequest{
		Compare: []compare{{Key: s.markKey(), Target: "MOD", Result: "GREATER"}},
		Success: []requestOp{{Range: &rangeRequest{Key: s.markKey()}}, del(s.markKey())},
	}
	if err := s.c.call(ctx, "/v3/kv/txn", take, &resp); err != nil {
		return nil, 0, s.unavailable("scan", err)
	}
	if !resp.Succeeded || len(resp.Responses) == 0 || resp.Responses[0].Range == nil || len(resp.Responses[0].Range.KVs) == 0 {
		return s.crashedNow(ctx)
	}
	since, err := strconv.ParseInt(string(resp.Responses[0].Range.KVs[0].Value), 10, 64)
	if err != nil {
		return s.crashedNow(ctx)
	}
	through := resp.Header.Revision
	jobs, ok, err := s.deletedLiveness(ctx, since+1, through)
	if err != nil {
		return nil, 0, err
	}
	if !ok {
		return s.crashedNow(ctx)
	}
	return jobs, through, nil
}

// deletedLiveness replays the deletions of liveness keys from revision
// from through the deletion of the scan's mark at revision through, and
// returns their jobs. ok is false when etcd compacted revisions since
// from.
func (s *Store) deletedLiveness(ctx context.Context, from, through int64) (jobs []string, ok bool, err error) {
	end := s.prefix(kindLive)
	end[len(end)-1]++
	body, err := json.Marshal(watchRequest{Create: &watchCreate{Key: s.markKey(), RangeEnd: end, StartRevision: from, Filters: []string{"NOPUT"}}})
	if err != nil {
		return nil, false, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.c.stream(wctx, "/v3/watch", body)
	if err != nil {
		return nil, false, s.unavailable("scan", err)
	}
	defer stream.Close()
	dec := json.NewDecoder(stream)
	seen := map[string]bool{}
	mark := string(s.markKey())
	for {
		var msg watchResponse
		if err := dec.Decode(&msg); err != nil {
			return nil, false, s.unavailable("scan", fmt.Errorf("replaying deletions: %w", err))
		}
		if msg.Error != nil {
			return nil, false, s.unavailable("scan", msg.Error)
		}
		r := msg.Result
		if r == nil {
			return nil, false, s.unavailable("scan", errUnexpected)
		}
		if r.Canceled {
			return nil, false, nil
		}
		for _, e := range r.Events {
			key := string(e.KV.Key)
			if key == mark {
				if e.KV.ModRevision >= through {
					return jobs, true, nil
				}
				continue
			}
			if job, _, err := s.jobSlot(kindLive, e.KV.Key); err == nil && !seen[job] {
				seen[job] = true
				jobs = append(jobs, job)
			}
		}
	}
}

// crashedNow reads the keys (only) of every evidence and liveness in one
// revision and returns the jobs with a slot with evidence and no liveness,
// and that revision.
func (s *Store) crashedNow(ctx context.Context) ([]string, int64, error) {
	var resp txnResponse
	req := txnRequest{Success: []requestOp{
		{Range: s.rangeOf(kindLive, true, false)},
		{Range: s.rangeOf(kindEvidence, true, false)},
	}}
	if err := s.c.call(ctx, "/v3/kv/txn", req, &resp); err != nil {
		return nil, 0, s.unavailable("scan", err)
	}
	if len(resp.Responses) != 2 || resp.Responses[0].Range == nil || resp.Responses[1].Range == nil {
		return nil, 0, s.unavailable("scan", errUnexpected)
	}
	live := map[string]bool{} // the liveness keys, by what follows the kind
	for _, kv := range resp.Responses[0].Range.KVs {
		live[s.jobOf(kindLive, kv.Key)] = true
	}
	var suspects []string
	for _, kv := range resp.Responses[1].Range.KVs {
		job, _, err := s.jobSlot(kindEvidence, kv.Key)
		if err == nil && !live[s.jobOf(kindEvidence, kv.Key)] && !slices.Contains(suspects, job) {
			suspects = append(suspects, job)
		}
	}
	return suspects, resp.Header.Revision, nil
}

// countCrashes counts the crashes of each of jobs that still has a slot
// with evidence without liveness, in as few transactions as etcd's
// --max-txn-ops allows (txnOps).
func (s *Store) countCrashes(ctx context.Context, jobs []string) ([]leasestore.Crash, error) {
	states, err := s.read(ctx, "scan", jobs...)
	if err != nil {
		return nil, err
	}
	var crashes []leasestore.Crash
	for len(states) > 0 {
		n, size := 0, 0
		for ; n < len(states); n++ {
			if size += len(s.guards(states[n])) + 2*len(states[n].slots) + 4; size > txnOps && n > 0 {
				break
			}
		}
		found, err := s.countCrashesOf(ctx, states[:n])
		crashes = append(crashes, found...)
		if err != nil {
			return crashes, err
		}
		states = states[n:]
	}
	return crashes, nil
}

// txnOps is etcd's default --max-txn-ops: the most compares, and the most
// operations of either branch, of one transaction.
const txnOps = 128

// countCrashesOf counts, in one transaction, the crash of each of states'
// jobs that still has a slot with evidence without liveness; when another
// client wrote one of them in between, it starts again on the fresh
// states.
func (s *Store) countCrashesOf(ctx context.Context, states []*jobState) ([]leasestore.Crash, error) {
	for range maxConflicts {
		at := now()
		var crashed []*jobState
		var crashes []leasestore.Crash
		var ops []requestOp
		for _, st := range states {
			if !st.crashed() {
				continue
			}
			rec := st.asRecord(at)
			step, c := rules.Reap(rec, at)
			writes, _, err := s.writes(st, rec, step, at)
			if err != nil {
				return nil, s.unavailable("scan", err)
			}
			ops = append(ops, writes...)
			crashed = append(crashed, st)
			crashes = append(crashes, c...)
		}
		if len(crashed) == 0 {
			return nil, nil
		}
		ok, fresh, err := s.commit(ctx, "scan", crashed, ops)
		if err != nil {
			return nil, err
		}
		if ok {
			return crashes, nil
		}
		states = fresh
	}
	return nil, s.unavailable("scan", errContention)
}

// Leases lists the live leases, ordered by job and slot; see
// leasestore.Operator.
// Their expiry is etcd's count of each lease's TTL left, looked up a few
// at a time.
func (s *Store) Leases(ctx context.Context) ([]leasestore.Holder, error) {
	var resp txnResponse
	req := txnRequest{Success: []requestOp{
		{Range: s.rangeOf(kindLive, false, false)},
		{Range: s.rangeOf(kindEvidence, false, false)},
	}}
	if err := s.c.call(ctx, "/v3/kv/txn", req, &resp); err != nil {
		return nil, s.unavailable("list leases", err)
	}
	if len(resp.Responses) != 2 || resp.Responses[0].Range == nil || resp.Responses[1].Range == nil {
		return nil, s.unavailable("list leases", errUnexpected)
	}
	evidences := map[string]*evidence{} // by what follows the kind: the job, and the slot's suffix
	for _, kv := range resp.Responses[1].Range.KVs {
		ev := &evidence{}
		if json.Unmarshal(kv.Value, ev) == nil {
			evidences[s.jobOf(kindEvidence, kv.Key)] = ev
		}
	}
	at := now()
	var list []leasestore.Holder
	var ids []int64
	for _, kv := range resp.Responses[0].Range.KVs {
		job, slot, err := s.jobSlot(kindLive, kv.Key)
		if ev := evidences[s.jobOf(kindLive, kv.Key)]; err == nil && ev != nil && string(kv.Value) == strconv.FormatInt(ev.Token, 10) {
			run := *ev
			run.Slot = slot
			h := (&rules.Record{Job: job}).Holder(&run)
			h.ReadAt = at
			list = append(list, h)
			ids = append(ids, kv.Lease)
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, leaseLookups)
	for i := range list {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			list[i].ExpiresAt = at.Add(s.ttlLeft(ctx, ids[i]))
		})
	}
	wg.Wait()
	list = slices.DeleteFunc(list, func(h leasestore.Holder) bool { return !h.ExpiresAt.After(at) })
	slices.SortFunc(list, func(a, b leasestore.Holder) int { return cmp.Or(strings.Compare(a.Job, b.Job), a.Slot-b.Slot) })
	return list, nil
}

// Jobs lists the known jobs whose IDs start with prefix, ordered, at most
// limit of them: the keys of their records, which etcd reads in order; see
// leasestore.Operator.
func (s *Store) Jobs(ctx context.Context, prefix string, limit int) ([]string, error) {
	from := append(s.prefix(kindJob), prefix...)
	end := append([]byte(nil), from...)
	end[len(end)-1]++ // just past every key that starts with from: job IDs are ASCII
	var resp rangeResponse
	req := &rangeRequest{Key: from, RangeEnd: end, KeysOnly: true, Limit: int64(max(limit, 0))}
	if err := s.c.call(ctx, "/v3/kv/range", req, &resp); err != nil {
		return nil, s.unavailable("list jobs", err)
	}
	jobs := make([]string, 0, len(resp.KVs))
	for _, kv := range resp.KVs {
		jobs = append(jobs, s.jobOf(kindJob, kv.Key))
	}
	return jobs, nil
}

// Quarantined lists the quarantined jobs, ordered by job; see
// leasestore.Operator.
func (s *Store) Quarantined(ctx context.Context) ([]leasestore.Quarantine, error) {
	var resp rangeResponse
	if err := s.c.call(ctx, "/v3/kv/range", s.rangeOf(kindQuarantined, false, false), &resp); err != nil {
		return nil, s.unavailable("list quarantined", err)
	}
	list := make([]leasestore.Quarantine, 0, len(resp.KVs))
	for _, kv := range resp.KVs {
		var q leasestore.Quarantine
		if err := json.Unmarshal(kv.Value, &q); err != nil {
			return nil, s.unavailable("list quarantined", err)
		}
		list = append(list, q)
	}
	slices.SortFunc(list, func(a, b leasestore.Quarantine) int { return strings.Compare(a.Job, b.Job) })
	return list, nil
}

// Counts returns the number of jobs with a live lease and of quarantined
// jobs, read in one revision (the keys of the liveness, which several
// slots of a job may have, and the count of the quarantine index); see
// leasestore.Operator.
func (s *Store) Counts(ctx context.Context) (leasestore.Counts, error) {
	var resp txnResponse
	req := txnRequest{Success: []requestOp{
		{Range: s.rangeOf(kindLive, true, false)},
		{Range: s.rangeOf(kindQuarantined, false, true)},
	}}
	if err := s.c.call(ctx, "/v3/kv/txn", req, &resp); err != nil {
		return leasestore.Counts{}, s.unavailable("count", err)
	}
	if len(resp.Responses) != 2 || resp.Responses[0].Range == nil || resp.Responses[1].Range == nil {
		return leasestore.Counts{}, s.unavailable("count", errUnexpected)
	}
	jobs := map[string]bool{}
	for _, kv := range resp.Responses[0].Range.KVs {
		if job, _, err := s.jobSlot(kindLive, kv.Key); err == nil {
			jobs[job] = true
		}
	}
	return leasestore.Counts{InFlight: len(jobs), Quarantined: int(resp.Responses[1].Range.Count)}, nil
}
