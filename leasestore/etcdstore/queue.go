package etcdstore

import (
	"context"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// The job's queue of waiters is part of its record (rules.Record.Queue), in
// the record's key: a waiter's refused Acquire writes it (joining, or
// keeping its place once half its TTL is gone), and Leave is a transition
// like any other, each one transaction guarded by the revisions it read. A
// place lapses by the clock of the host that judges it, past the Until the
// waiter's own host wrote: within its TTL, give or take the skew of the
// two clocks (docs/etcd.md, The queue of waiters).

// Limits are the lease TTLs the store honours, from etcd's default minimum
// lease TTL (2 s) to its maximum (TTLs are rounded up to whole seconds),
// and the most slots it grants a job (maxSlots); see leasestore.Driver.
func (s *Store) Limits() leasestore.Limits {
	return leasestore.Limits{MinTTL: minTTL, MaxTTL: maxTTL, MaxSlots: maxSlots}
}

// Leave takes holder out of job's queue of waiters; see leasestore.Leaser.
// When a slot is free, it wakes the waiters (the record's Wakes): the
// slot may now be the next one's.
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
