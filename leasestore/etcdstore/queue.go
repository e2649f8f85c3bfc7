package etcdstore

import (
	"context"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// The job's queue of waiters is part of its record (rules.Record.Queue), in
// the record's key: a waiter's Acquire writes it (joining, or keeping its
// place), guarded like every transition. A waiter leaving wakes nobody
// through etcd: waiters watch deletions of the job's liveness, evidence and
// quarantine keys, and the next one learns of the free slot when it asks
// again, within its heartbeat.

var _ leasestore.Queuer = (*Store)(nil)

// MaxSlots is 1: the store keeps one run per job (its liveness and
// evidence keys); see leasestore.Queuer.
func (s *Store) MaxSlots() int { return 1 }

// Leave takes holder out of job's queue of waiters; see leasestore.Queuer.
func (s *Store) Leave(ctx context.Context, job, holder string) error {
	_, err := s.transact(ctx, "leave the queue", job, nil, func(st *jobState) ([]requestOp, error) {
		return s.apply(st, func(r *rules.Record, at time.Time) (rules.Step, error) {
			return rules.Leave(r, holder, at), nil
		})
	})
	if err != nil {
		return asUnavailable("leave the queue", err)
	}
	return nil
}
