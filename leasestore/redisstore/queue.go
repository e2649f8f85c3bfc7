package redisstore

import (
	"context"

	"github.com/leasectl/leasectl/leasestore"
)

// MaxSlots is the most slots the store grants a job: every run is found
// through the job's record (its slots), so the bound keeps a transition's
// reads small; see leasestore.Leaser.
func (s *Store) MaxSlots() int { return leasestore.MaxSlots }

// Leave takes holder out of job's queue of waiters, waking the waiters when
// a slot is free (lua/leave.lua); see leasestore.Leaser.
func (s *Store) Leave(ctx context.Context, job, holder string) error {
	if err := noNUL(holder); err != nil {
		return err
	}
	_, err := s.run(ctx, "leave the queue", scriptLeave, s.jobKeys(job), s.jobPrefix(job), job, holder)
	return err
}
