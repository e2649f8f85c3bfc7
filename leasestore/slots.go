package leasestore

import (
	"fmt"
	"time"
)

// MaxSlots is the most slots a job may have (AcquireRequest.Slots) on any
// store; a store may grant fewer (Limits.MaxSlots). Every run in flight is
// kept with the job's record, so the bound keeps a record, and the
// transition that rewrites it, small.
const MaxSlots = 1000

// Waiter is a run waiting in its job's queue (AcquireRequest.Wait). Its
// position is its place in JobStatus.Queue, counted from 1.
type Waiter struct {
	Worker string
	Host   string
	PID    int
	Since  time.Time // when it started waiting (the store's clock)
	Until  time.Time // when its place lapses unless it asks again
}

// Turn is the waiters whose turn it is: the first of queue (oldest first,
// lapsed places left out), as many as there are free slots. Those behind
// could not be granted a slot, so a store that wakes waiters in their turn
// wakes only these.
func Turn(queue []Waiter, free int) []string {
	var turn []string
	for _, w := range queue {
		if len(turn) >= free {
			break
		}
		turn = append(turn, w.Worker)
	}
	return turn
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
