package leasestore

import (
	"context"
	"fmt"
	"time"
)

// MaxSlots is the most slots a job may have (AcquireRequest.Slots): every
// run in flight is kept in the job's one record, so the bound keeps a
// record, and the transition that rewrites it, small.
const MaxSlots = 1000

// Queuer is the ability of a store to serve a job's waiters in the order
// they started waiting (AcquireRequest.Wait), and to run a job in up to
// MaxSlots slots at once (AcquireRequest.Slots). A store without it grants
// one run per job and ignores Wait (its waiters race on every release). No
// store may be asked for more slots than it grants: the supervisor refuses
// such a --slots before any I/O.
type Queuer interface {
	// MaxSlots is the most slots the store grants a job: 1 for a store that
	// keeps one run per job.
	MaxSlots() int
	// Leave takes holder out of job's queue of waiters, when it gives up
	// waiting (its --wait-timeout passed, a signal); a holder not in the
	// queue changes nothing. A waiter that dies without leaving lapses
	// within its own TTL instead. ctx bounds the call.
	Leave(ctx context.Context, job, holder string) error
}

// Waiter is a run waiting in its job's queue (AcquireRequest.Wait). Its
// position is its place in JobStatus.Queue, counted from 1.
type Waiter struct {
	Worker string
	Host   string
	PID    int
	Since  time.Time // when it started waiting (the store's clock)
	Until  time.Time // when its place lapses unless it asks again
}

// SlotsError is returned by Acquire when the request asks for another
// number of slots than the job's runs in flight were granted with: all
// runs of a job must agree on it, and a change takes effect once the job
// has no run in flight. It is a usage error (exit 64).
type SlotsError struct {
	Job       string
	Slots     int // the slots of the job's runs in flight
	Requested int
}

// Error names both numbers.
func (e *SlotsError) Error() string {
	return fmt.Sprintf("job %q runs with --slots %d, this run asks for --slots %d: all runs of a job must agree, and a change takes effect once none is in flight",
		e.Job, e.Slots, e.Requested)
}
