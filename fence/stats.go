package fence

import (
	"math/rand/v2"
	"sync/atomic"
)

// Stats are a Checker's counters since New.
type Stats struct {
	// Accepted, Stale and Failed count the checks (Check and Admit) that
	// accepted the token, rejected it, and could not decide.
	Accepted, Stale, Failed uint64
	// StoreChecks counts the checks that asked the store; the others were
	// answered from memory.
	StoreChecks uint64
	// Jobs is how many jobs the Checker remembers now.
	Jobs int
}

// Stats returns the Checker's counters, e.g. for metrics.
func (c *Checker) Stats() Stats {
	st := Stats{Jobs: int(c.njobs.Load())}
	for i := range c.counts {
		n := &c.counts[i]
		st.Accepted += n.accepted.Load()
		st.Stale += n.stale.Load()
		st.Failed += n.failed.Load()
		st.StoreChecks += n.storeChecks.Load()
	}
	return st
}

// countStripes is how many sets of counters a Checker keeps: a check adds
// to one picked at random, so that checks on many cores do not all write
// to one cache line.
const countStripes = 16

// counters are one stripe of a Checker's counters, padded to a cache line
// of its own.
type counters struct {
	accepted, stale, failed, storeChecks atomic.Uint64
	_                                    [32]byte
}

// count returns a stripe of counters to add to.
func (c *Checker) count() *counters { return &c.counts[rand.Uint32()%countStripes] }
