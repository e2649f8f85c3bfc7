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

// dueEntry is the value of a job's due index key: what Overdue reports of
// it, so that listing the overdue jobs reads no record.
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
// clock, one range: its cost follows the overdue jobs.
func (s *Store) Overdue(ctx context.Context) ([]leasestore.Overdue, error) {
	at := now()
	end := fmt.Appendf(s.prefix(kindDue), "%020d", at.UnixMicro())
	var resp rangeResponse
	if err := s.c.call(ctx, "/v3/kv/range", &rangeRequest{Key: s.prefix(kindDue), RangeEnd: end}, &resp); err != nil {
		return nil, s.unavailable("list overdue", err)
	}
	list := make([]leasestore.Overdue, 0, len(resp.KVs))
	for _, kv := range resp.KVs {
		us, job, ok := strings.Cut(s.jobOf(kindDue, kv.Key), "/")
		due, err := strconv.ParseInt(us, 10, 64)
		var e dueEntry
		if !ok || err != nil || json.Unmarshal(kv.Value, &e) != nil {
			return nil, s.unavailable("list overdue", fmt.Errorf("due index key %q is not leasectl's", kv.Key))
		}
		list = append(list, leasestore.Overdue{Job: job, Expect: e.Expect, LastSuccess: e.LastSuccess,
			Due: time.UnixMicro(due).UTC(), Now: at})
	}
	slices.SortFunc(list, func(a, b leasestore.Overdue) int { return strings.Compare(a.Job, b.Job) })
	return list, nil
}
