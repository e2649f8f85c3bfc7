package failover

import (
	"sync"
	"sync/atomic"
	"time"
)

// Endpoints is the list of a store's endpoints a client calls, with the
// one calls start at and those known to be silent.
type Endpoints struct {
	names     []string
	preferred atomic.Int32
	notes     *notes // nil: silence is kept in memory only

	loadOnce sync.Once
	mu       sync.Mutex
	silent   []time.Time // per endpoint: silent until then
}

// New returns the endpoints names (as the client addresses them, without
// credentials), keeping notes of the silent ones in dir; dir "" keeps them
// in memory only, as does a single endpoint, which has nothing to try
// first instead. It does no I/O: the notes are read at the first call.
func New(names []string, dir string) *Endpoints {
	e := &Endpoints{names: names, silent: make([]time.Time, len(names))}
	if dir != "" && len(names) > 1 {
		e.notes = &notes{dir: dir}
	}
	return e
}

// Names returns the endpoints in the order given.
func (e *Endpoints) Names() []string { return e.names }

// Order returns the endpoints' indexes in the order a call tries them: from
// the preferred one on, those known silent last.
func (e *Endpoints) Order() []int {
	e.load()
	first := int(e.preferred.Load())
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	order := make([]int, 0, len(e.names))
	var quiet []int
	for i := range e.names {
		n := (first + i) % len(e.names)
		if now.Before(e.silent[n]) {
			quiet = append(quiet, n)
			continue
		}
		order = append(order, n)
	}
	return append(order, quiet...)
}

// Answered records that endpoint i answered: calls start there, and it is
// no longer known silent.
func (e *Endpoints) Answered(i int) {
	e.preferred.Store(int32(i))
	e.mu.Lock()
	was := !e.silent[i].IsZero()
	e.silent[i] = time.Time{}
	e.mu.Unlock()
	if was && e.notes != nil {
		e.notes.clear(e.names[i])
	}
}

// Failed records that endpoint i failed a request (it broke the connection,
// or said it cannot serve): the next call starts with the endpoint after
// it, unless another call moved the preference already.
func (e *Endpoints) Failed(i int) {
	e.preferred.CompareAndSwap(int32(i), int32((i+1)%len(e.names)))
}

// Silent records that endpoint i left a request unanswered past the hedge
// bound: calls try it last for silentFor, here and, through its note, in
// the processes that start on this host meanwhile.
func (e *Endpoints) Silent(i int) {
	e.Failed(i)
	until := time.Now().Add(silentFor)
	e.mu.Lock()
	e.silent[i] = until
	e.mu.Unlock()
	if e.notes != nil {
		e.notes.mark(e.names[i], until)
	}
}

// load reads the notes once, at the first call.
func (e *Endpoints) load() {
	if e.notes == nil {
		return
	}
	e.loadOnce.Do(func() {
		for i, name := range e.names {
			if until := e.notes.read(name); time.Now().Before(until) {
				e.mu.Lock()
				e.silent[i] = until
				e.mu.Unlock()
			}
		}
	})
}
