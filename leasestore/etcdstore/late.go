package etcdstore

import (
	"context"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// RecordLate records the outcome of a run that did not reach the store in
// time, and undoes what its absence did; see leasestore.Leaser and
// docs/semantics.md, RecordLate. Like every transition, it is one
// transaction guarded by the revisions of the job's keys as it read them;
// what a counted crash needs corrected is worked out by the rules from the
// record's history.
func (s *Store) RecordLate(ctx context.Context, late leasestore.LateOutcome) (leasestore.Correction, error) {
	var c leasestore.Correction
	_, err := s.transact(ctx, "record late outcome", late.Job, nil, func(st *jobState) ([]requestOp, error) {
		return s.apply(st, func(r *rules.Record, at time.Time) (step rules.Step, _ error) {
			step, c = rules.RecordLate(r, st.rec.History, late, at)
			return step, nil
		})
	})
	if err != nil {
		return leasestore.Correction{}, asUnavailable("record late outcome", err)
	}
	return c, nil
}
