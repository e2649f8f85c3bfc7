package redisstore

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// expectArgs are an expectation's every and grace as the scripts take them:
// microseconds in decimal, "" for none.
func expectArgs(x *leasestore.Expectation) (every, grace string) {
	if x == nil {
		return "", ""
	}
	return strconv.FormatInt(x.Every.Microseconds(), 10), strconv.FormatInt(x.Grace.Microseconds(), 10)
}

// expectation decodes the record's expectation (xe, xg, xs); nil when it
// has none.
func (rec record) expectation() *leasestore.Expectation {
	if rec["xe"] == "" {
		return nil
	}
	return &leasestore.Expectation{Every: time.Duration(rec.int("xe")) * time.Microsecond,
		Grace: time.Duration(rec.int("xg")) * time.Microsecond, Since: rec.time("xs")}
}

// Expect sets or clears job's expectation; see Store.
func (s *Store) Expect(ctx context.Context, job string, x *leasestore.Expectation, note leasestore.Note) error {
	if err := noNUL(note.By, note.Reason); err != nil {
		return err
	}
	every, grace := expectArgs(x)
	_, err := s.run(ctx, "expect", scriptExpect, s.jobKeys(job), s.jobPrefix(job), job, every, grace, note.By, x.Detail(note))
	return err
}

// Overdue lists the jobs past their expectation, ordered by job; see Store.
// Each shard's script reads its due index up to now and the records of the
// jobs it names, so the cost follows the overdue jobs.
func (s *Store) Overdue(ctx context.Context) ([]leasestore.Overdue, error) {
	replies, err := s.runShards(ctx, "list overdue", scriptOverdue, allShards())
	if err != nil {
		return nil, err
	}
	var list []leasestore.Overdue
	for _, r := range replies {
		now := r.time(0)
		for i := 1; i+4 < r.len() && r.err == nil; i += 5 {
			rec := record{"xe": r.str(i + 1), "xg": r.str(i + 2), "xs": r.str(i + 3), "s": r.str(i + 4)}
			rec.check(r)
			x := rec.expectation()
			if x == nil {
				r.fail("overdue job %q has no expectation", r.str(i))
				break
			}
			last := rec.time("s")
			list = append(list, leasestore.Overdue{Job: r.str(i), Expect: *x, LastSuccess: last, Due: x.Due(last), Now: now})
		}
		if r.err != nil {
			return nil, r.err
		}
	}
	slices.SortFunc(list, func(a, b leasestore.Overdue) int { return strings.Compare(a.Job, b.Job) })
	return list, nil
}
