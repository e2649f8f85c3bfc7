package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// dueEntry is the value of a job's due index key: what the Overdue of an
// earlier leasectl reported of it (this one reads the record instead).
type dueEntry struct {
	Expect      leasestore.Expectation `json:"expect"`
	LastSuccess time.Time              `json:"last_success,omitzero"`
}

// dueKey is job's due index key for a job due at due: the time first, in
// 20 digits, so that the keys sort by due time and the overdue ones are a
// range.
func (s *Store) dueKey(job string, due time.Time) []byte {
	return fmt.Appendf(s.prefix(kindDue), "%020d/%s", due.UnixMicro(), job)
}

// dueWrites are the writes that move job's due index key from what before
// needs to what after needs: none when its due time and last success are
// unchanged. Written in the transaction that writes the record, whose
// revision guards it, like the quarantine index.
func (s *Store) dueWrites(job string, before, after *rules.Record) ([]requestOp, error) {
	was, is := rules.Due(before), rules.Due(after)
	if was.Equal(is) && (is.IsZero() || before.Expect.Same(*after.Expect) &&
		before.Expect.Since.Equal(after.Expect.Since) && before.LastSuccess.Equal(after.LastSuccess)) {
		return nil, nil
	}
	var ops []requestOp
	if !was.IsZero() {
		ops = append(ops, del(s.dueKey(job, was)))
	}
	if !is.IsZero() {
		put, err := putJSON(s.dueKey(job, is), dueEntry{Expect: *after.Expect, LastSuccess: after.LastSuccess}, 0)
		if err != nil {
			return nil, err
		}
		ops = append(ops, put)
	}
	return ops, nil
}

// Expect sets or clears job's expectation; see leasestore.Operator.
func (s *Store) Expect(ctx context.Context, job string, x *leasestore.Expectation, note leasestore.Note) error {
	_, err := s.transact(ctx, "expect", job, nil, func(st *jobState) ([]requestOp, error) {
		return s.apply(st, func(r *rules.Record, at time.Time) (rules.Step, error) {
			return rules.Expect(r, x, note, at), nil
		})
	})
	if err != nil {
		return asUnavailable("expect", err)
	}
	return nil
}

// Overdue lists the jobs past their expectation, ordered by job; see
// leasestore.Operator. It reads the due index keys before this host's
// clock, one range, then the records of their jobs, batchJobs in a
// transaction: its cost follows the overdue jobs. A key its record does
// not name (left by a leasectl that rewrote the record without its
// expectation) is skipped and deleted.
func (s *Store) Overdue(ctx context.Context) ([]leasestore.Overdue, error) {
	at := now()
	end := fmt.Appendf(s.prefix(kindDue), "%020d", at.UnixMicro())
	var resp rangeResponse
	if err := s.c.call(ctx, "/v3/kv/range", &rangeRequest{Key: s.prefix(kindDue), RangeEnd: end}, &resp); err != nil {
		return nil, s.unavailable("list overdue", err)
	}
	list := make([]leasestore.Overdue, 0, len(resp.KVs))
	for kvs := range slices.Chunk(resp.KVs, batchJobs) {
		found, err := s.overdueOf(ctx, at, kvs)
		if err != nil {
			return nil, err
		}
		list = append(list, found...)
	}
	slices.SortFunc(list, func(a, b leasestore.Overdue) int { return strings.Compare(a.Job, b.Job) })
	return list, nil
}

// overdueOf reads, in one transaction, the records of the jobs of due
// index keys kvs, and returns those overdue at at by the time their key
// names. It deletes each key its record is not due at, in a transaction
// guarded by the revisions of both, so that a key written meanwhile stays.
func (s *Store) overdueOf(ctx context.Context, at time.Time, kvs []keyValue) ([]leasestore.Overdue, error) {
	jobs := make([]string, len(kvs))
	dues := make([]int64, len(kvs))
	reads := make([]requestOp, len(kvs))
	for i, kv := range kvs {
		us, job, ok := strings.Cut(s.jobOf(kindDue, kv.Key), "/")
		due, err := strconv.ParseInt(us, 10, 64)
		if !ok || err != nil {
			return nil, s.unavailable("list overdue", fmt.Errorf("due index key %q is not leasectl's", kv.Key))
		}
		jobs[i], dues[i] = job, due
		reads[i] = requestOp{Range: &rangeRequest{Key: s.key(kindJob, job)}}
	}
	var resp txnResponse
	if err := s.c.call(ctx, "/v3/kv/txn", txnRequest{Success: reads}, &resp); err != nil {
		return nil, s.unavailable("list overdue", err)
	}
	if len(resp.Responses) != len(kvs) {
		return nil, s.unavailable("list overdue", fmt.Errorf("%d answers to %d reads", len(resp.Responses), len(kvs)))
	}
	var list []leasestore.Overdue
	for i, answer := range resp.Responses {
		rec, rev := &record{}, int64(0)
		if r := answer.Range; r != nil && len(r.KVs) > 0 {
			if err := json.Unmarshal(r.KVs[0].Value, rec); err != nil {
				return nil, s.unavailable("list overdue", fmt.Errorf("record of job %q is not leasectl's: %w", jobs[i], err))
			}
			rev = r.KVs[0].ModRevision
		}
		rec.Job = jobs[i]
		if rules.Due(&rec.Record).UnixMicro() == dues[i] {
			if o := rules.Overdue(&rec.Record, at); o != nil {
				list = append(list, *o)
			}
			continue
		}
		orphan := txnRequest{
			Compare: []compare{
				{Key: s.key(kindJob, jobs[i]), Target: "MOD", Result: "EQUAL", ModRevision: rev},
				{Key: kvs[i].Key, Target: "MOD", Result: "EQUAL", ModRevision: kvs[i].ModRevision},
			},
			Success: []requestOp{del(kvs[i].Key)},
		}
		if err := s.c.call(ctx, "/v3/kv/txn", orphan, nil); err != nil {
			return nil, s.unavailable("list overdue", err)
		}
	}
	return list, nil
}
