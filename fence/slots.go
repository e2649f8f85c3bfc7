package fence

import (
	"fmt"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// noSlot is the slot of the checks that name none (Check, Admit): slot 0,
// and one mark for the job until it is checked with a slot.
const noSlot = -1

// validSlot returns an ErrInvalid for a slot no job has.
func (c *Checker) validSlot(slot int) error {
	if slot < 0 || slot >= leasestore.MaxSlots {
		c.count().failed.Add(1)
		return fmt.Errorf("%w: slot %d: slots are counted from 0 and a job has at most %d", ErrInvalid, slot, leasestore.MaxSlots)
	}
	return nil
}

// mark is a high-water mark: of a job, or of one of its slots.
type mark struct {
	// high is the highest token learned: no token below it is accepted;
	// highLive is whether its run was live as last learned.
	high     int64
	highLive bool

	// BoundedStaleness: the token the store last confirmed, and when the
	// request that confirmed it was sent.
	confirmed   int64
	confirmedAt time.Time
}

// learn raises the mark to token, a token the store granted.
func (k *mark) learn(token int64, live bool) {
	switch {
	case token > k.high:
		k.high, k.highLive = token, live
	case token == k.high && !live:
		k.highLive = false
	}
}

// mark returns the mark a check in slot decides on: the job's until the
// job is checked with a slot, then the slot's (slot 0 for noSlot). A slot
// named has its mark: check grows slots first.
func (m *memo) mark(slot int) *mark {
	if m.slots == nil {
		return &m.job
	}
	return &m.slots[max(slot, 0)]
}

// ended marks the slot whose mark is token as no longer live: the store or
// the feed said token's run has ended, in whichever slot it ran.
func (m *memo) ended(token int64) {
	for i := range m.slots {
		if m.slots[i].high == token {
			m.slots[i].highLive = false
		}
	}
}

// grow gives the job a mark for every slot up to slot: from its first
// check with a slot on, the job is fenced per slot.
func (e *entry) grow(slot int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if n := slot + 1 - len(e.state.slots); n > 0 {
		e.state.slots = append(e.state.slots, make([]mark, n)...)
		e.publish()
	}
}

// raise raises slot's mark to token, accepted from memory.
func (e *entry) raise(slot int, token int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if k := e.state.mark(slot); token > k.high {
		k.high, k.highLive = token, true
		e.publish()
	}
}

// admission is what Admit holds for the writes of one slot: how many are
// admitted and not done, all with token; drained is closed when the last
// is done.
type admission struct {
	active  int
	token   int64
	drained chan struct{}
}

// admission returns slot's admissions, made on its first Admit; e.mu is
// held.
func (e *entry) admission(slot int) *admission {
	i := max(slot, 0)
	if n := i + 1 - len(e.admits); n > 0 {
		e.admits = append(e.admits, make([]*admission, n)...)
	}
	if e.admits[i] == nil {
		e.admits[i] = &admission{drained: make(chan struct{})}
	}
	return e.admits[i]
}

// busy reports whether writes are admitted in any slot; e.mu is held.
func (e *entry) busy() bool {
	for _, a := range e.admits {
		if a != nil && a.active > 0 {
			return true
		}
	}
	return false
}
