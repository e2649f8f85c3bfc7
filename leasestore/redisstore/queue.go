package redisstore

import (
	"context"

	"github.com/leasectl/leasectl/leasestore"
)

// Limits are leasestore.MaxSlots slots and every positive TTL: every run
// is found through the job's record (its slots), so the bound keeps a
// transition's reads small; see leasestore.Driver.
func (s *Store) Limits() leasestore.Limits { return leasestore.Limits{MaxSlots: leasestore.MaxSlots} }

// Leave takes holder out of job's queue of waiters, waking the waiters when
// a slot is free (lua/leave.lua); see leasestore.Leaser.
func (s *Store) Leave(ctx context.Context, job, holder string) error {
	if err := noNUL(holder); err != nil {
		return err
	}
	_, err := s.run(ctx, "leave the queue", scriptLeave, s.jobKeys(job), s.jobPrefix(job), job, holder)
	return err
}
