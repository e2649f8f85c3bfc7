package etcdstore

import (
	"context"

	"github.com/leasectl/leasectl/leasestore"
)

// RecordLate records the outcome of a run that did not reach the store in
// time, and undoes what its absence did; see leasestore.LateRecorder and
// docs/semantics.md, RecordLate. Like every transition, it is one
// transaction guarded by the revisions of the job's keys as it read them;
// what a counted crash needs corrected is worked out from the record's
// history (leasestore.CorrectLate).
func (s *Store) RecordLate(ctx context.Context, late leasestore.LateOutcome) (leasestore.Correction, error) {
	var c leasestore.Correction
	_, err := s.transact(ctx, "record late outcome", late.Job, nil, func(st *jobState) ([]requestOp, error) {
		c = leasestore.Correction{}
		ops, err := s.recordLate(st, late, &c)
		return ops, err
	})
	if err != nil {
		return leasestore.Correction{}, asUnavailable("record late outcome", err)
	}
	return c, nil
}

// recordLate decides RecordLate on st, filling in c, and returns the
// writes; none when there is nothing to record.
func (s *Store) recordLate(st *jobState, late leasestore.LateOutcome, c *leasestore.Correction) ([]requestOp, error) {
	r := st.rec
	gaveUp := late.Token == 0 && r.Abandoned != late.Holder
	if gaveUp {
		r.Abandoned = late.Holder
	}
	// Step 1: the run's evidence is there: Release.
	if ev := st.evd; ev != nil && ev.Holder == late.Holder && (late.Token == 0 || ev.Token == late.Token) {
		ops, err := s.release(st, late.Holder, late.Outcome)
		c.Released, c.Crashes = true, r.Crashes
		return ops, err
	}
	c.Crashes = r.Crashes
	fix := leasestore.CorrectLate(r.History, late.Holder, late.Token, late.Outcome, r.Crashes)
	if fix.Recorded || fix.Token == 0 || fix.Token > r.LastToken {
		// Step 3 with nothing to add; only a holder that gave up is kept.
		if !gaveUp {
			return nil, nil
		}
		rec, err := s.putRecord(st)
		return []requestOp{rec}, err
	}
	// Step 2 (the crash was counted), or step 3 with a known token.
	at := now()
	var ops []requestOp
	c.CrashWithdrawn, c.Crashes = fix.Withdrawn, fix.Crashes
	r.Crashes = fix.Crashes
	if fix.Success.After(r.LastSuccess) {
		r.LastSuccess = fix.Success
	}
	if q := r.Quarantine; q != nil && fix.LiftsQuarantine(q.By, q.Since, r.MaxCrashes) {
		r.Quarantine = nil
		r.event(at, fix.LiftEvent())
		// Deleting the quarantine key wakes the job's waiters (watch.go).
		ops = append(ops, del(s.key(kindQuarantined, st.job)))
		c.QuarantineLifted = true
	}
	r.LastOutcome = fix.LastOutcome(late, r.LastOutcome, at)
	r.event(at, fix.LateEvent(late, c.QuarantineLifted))
	rec, err := s.putRecord(st)
	if err != nil {
		return nil, err
	}
	return append(ops, rec), nil
}
