package pgstore

import (
	"context"

	"github.com/leasectl/leasectl/leasestore"
)

// RecordLate records the outcome of a run that did not reach the store in
// time, and undoes what its absence did; see leasestore.Leaser and
// docs/semantics.md, RecordLate. Like every transition it is one call of
// one function (sql/recordlate.sql), so one transaction under the job's
// lock: the history walk that package rules does in Go (RecordLate) is done
// there in plpgsql, rather than in Go between a read and a guarded write,
// so that it needs no retry on a conflict and holds the job's lock for no
// network round trip.
func (s *Store) RecordLate(ctx context.Context, late leasestore.LateOutcome) (leasestore.Correction, error) {
	out := late.Outcome
	if err := text(late.Holder, out.Reason); err != nil {
		return leasestore.Correction{}, err
	}
	var r struct {
		Released  bool `json:"released"`
		Withdrawn bool `json:"withdrawn"`
		Lifted    bool `json:"lifted"`
		Crashes   int  `json:"crashes"`
	}
	err := s.call(ctx, "record late outcome", s.sqlRecordLate, &r, version(), []byte(late.Job), []byte(late.Holder),
		integer(late.Token), []byte(out.Result), integer(int64(out.ExitCode)), integer(int64(out.Signal)),
		integer(int64(out.Duration)), []byte(out.Reason), []byte(out.Detail()))
	if err != nil {
		return leasestore.Correction{}, err
	}
	return leasestore.Correction{Released: r.Released, CrashWithdrawn: r.Withdrawn, QuarantineLifted: r.Lifted,
		Crashes: r.Crashes}, nil
}
