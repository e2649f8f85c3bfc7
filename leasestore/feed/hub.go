// Package feed is the portable half of every store's token feed
// (leasestore.TokenFeed): the watches and their fan-out, the one rule that
// leaves out what a watch already knows, the lost-then-read-again sequence,
// and the heartbeat's last check. A store brings the other half, a Source:
// how it learns of changes (pub/sub, LISTEN/NOTIFY, a watch stream, a file
// poke), how it reads a job's state, and its barrier.
package feed

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/leasectl/leasectl/leasestore"
)

// Source is a store's side of its token feed.
type Source interface {
	// Follow makes the source hand every change of job committed from now
	// on to the hub (Publish, or Reread where it only learns that
	// something changed), and returns once that holds. The hub calls it
	// for the first watch of a job, and again for a job whose last watch
	// closed meanwhile.
	Follow(ctx context.Context, job string) error
	// Unfollow stops following job, whose last watch closed.
	Unfollow(job string)
	// Read reads job's state from the store: Read set, Token 0 for a job
	// the store has no record of.
	Read(ctx context.Context, job string) (leasestore.TokenState, error)
	// Barrier returns once every change committed before the call has been
	// handed to the hub, and the jobs the source had lost since have been
	// read again (Reread); an error matching leasestore.ErrUnavailable when
	// that could not be shown within ctx.
	Barrier(ctx context.Context) error
}

// Hub is a store's TokenFeed over its Source. Its methods are safe for
// concurrent use.
type Hub struct {
	src Source

	// deliver is held while a fn runs: one call at a time per store, as
	// leasestore.TokenFeed promises.
	deliver sync.Mutex

	mu     sync.Mutex
	jobs   map[string]*job
	closed bool
}

// job is the watches of one job.
type job struct {
	name string
	// follow is held while the job is being followed (Source.Follow) and
	// while its watches are added or removed, one at a time.
	follow sync.Mutex
	// mu is held while the job's state is read and delivered, and while
	// watches' fns run, so that each read reaches the watches before the
	// changes received after it, and Close waits for a running fn.
	mu      sync.Mutex
	watches []*watch
}

// watch is one TokenWatch.
type watch struct {
	hub    *Hub
	job    *job
	fn     func(leasestore.TokenState)
	closed bool
	// synced: fn has had a read since the watch started or was lost;
	// changes published meanwhile are left out (the read includes them).
	synced bool
	last   leasestore.TokenState // what fn was last called with
}

// New returns the hub of src.
func New(src Source) *Hub { return &Hub{src: src, jobs: map[string]*job{}} }

// Watch starts following job for fn; see leasestore.TokenFeed.WatchTokens.
func (h *Hub) Watch(ctx context.Context, name string, fn func(leasestore.TokenState)) (leasestore.TokenWatch, error) {
	j, err := h.lockJob(name)
	if err != nil {
		return nil, err
	}
	defer j.follow.Unlock()
	j.mu.Lock()
	first := len(j.watches) == 0
	j.mu.Unlock()
	if first {
		if err := h.src.Follow(ctx, name); err != nil {
			h.forget(j)
			return nil, unavailable("watch tokens", err)
		}
	}
	w := &watch{hub: h, job: j, fn: fn}
	j.mu.Lock()
	st, err := h.src.Read(ctx, name)
	if err == nil {
		j.watches = append(j.watches, w)
		w.deliver(st)
	}
	j.mu.Unlock()
	if err != nil {
		if first {
			h.src.Unfollow(name)
			h.forget(j)
		}
		return nil, unavailable("watch tokens", err)
	}
	return w, nil
}

// lockJob returns the watches of name, made if need be, with their follow
// lock held.
func (h *Hub) lockJob(name string) (*job, error) {
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return nil, &leasestore.UnavailableError{Op: "watch tokens", Err: leasestore.ErrClosed}
		}
		j := h.jobs[name]
		if j == nil {
			j = &job{name: name}
			h.jobs[name] = j
		}
		h.mu.Unlock()
		j.follow.Lock()
		if h.job(name) == j {
			return j, nil
		}
		// Its last watch closed meanwhile, and took it out: start again.
		j.follow.Unlock()
	}
}

// forget drops j if it has no watches; j.follow is held.
func (h *Hub) forget(j *job) {
	h.mu.Lock()
	defer h.mu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.watches) == 0 && h.jobs[j.name] == j {
		delete(h.jobs, j.name)
	}
}

// Close stops the watch; fn is not called once it has returned.
func (w *watch) Close() error {
	j := w.job
	j.follow.Lock()
	defer j.follow.Unlock()
	j.mu.Lock()
	if w.closed {
		j.mu.Unlock()
		return nil
	}
	w.closed = true
	for i, o := range j.watches {
		if o == w {
			j.watches = append(j.watches[:i:i], j.watches[i+1:]...)
			break
		}
	}
	last := len(j.watches) == 0
	j.mu.Unlock()
	if last {
		w.hub.src.Unfollow(j.name)
		w.hub.forget(j)
	}
	return nil
}

// deliver calls fn with st unless the watch is closed or st tells it
// nothing new; j.mu is held. A read always counts and syncs the watch. A
// published change reaches only a synced watch, and not when it repeats
// the last state or is older than it: a token below the last one, or the
// last token live again after its run ended (tokens only rise, and a run
// that ended does not start again, so such a change was overtaken by a
// read that included it).
func (w *watch) deliver(st leasestore.TokenState) {
	if w.closed {
		return
	}
	if !st.Read {
		last := w.last
		if !w.synced || st.Token < last.Token || st.Token == last.Token && (st.Live == last.Live || st.Live && !last.Live) {
			return
		}
	} else {
		w.synced = true
	}
	st.Job = w.job.name
	w.last = st
	w.hub.deliver.Lock()
	defer w.hub.deliver.Unlock()
	w.fn(st)
}

// Publish hands the hub a change of st.Job that the source received (Read
// false), in the order the store committed them.
func (h *Hub) Publish(st leasestore.TokenState) {
	j := h.job(st.Job)
	if j == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, w := range j.watches {
		w.deliver(st)
	}
}

// job returns the watches of name, or nil.
func (h *Hub) job(name string) *job {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.jobs[name]
}

// Lost tells the watches of names (of every job, when names is empty)
// that changes may have been missed: each gets a Lost state, and no change
// until its next read (Reread).
func (h *Hub) Lost(names ...string) {
	for _, j := range h.pick(names) {
		j.mu.Lock()
		for _, w := range j.watches {
			if w.synced && !w.closed {
				w.synced = false
				w.last = leasestore.TokenState{Job: j.name, Lost: true}
				h.deliver.Lock()
				w.fn(w.last)
				h.deliver.Unlock()
			}
		}
		j.mu.Unlock()
	}
}

// pick returns the jobs named, or every job when names is empty.
func (h *Hub) pick(names []string) []*job {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*job
	if len(names) == 0 {
		for _, j := range h.jobs {
			out = append(out, j)
		}
		return out
	}
	for _, name := range names {
		if j := h.jobs[name]; j != nil {
			out = append(out, j)
		}
	}
	return out
}

// Reread reads the state of names (of every job, when names is empty) and
// delivers it to their watches, synced again; the source calls it once it
// follows a lost job again, and where it learns only that a job changed.
// With lostOnly, it reads only the jobs with a watch that is not synced.
// It returns the first failure; those jobs' watches stay as they were.
func (h *Hub) Reread(ctx context.Context, lostOnly bool, names ...string) error {
	var first error
	for _, j := range h.pick(names) {
		j.mu.Lock()
		if !lostOnly || j.lost() {
			st, err := h.src.Read(ctx, j.name)
			if err == nil {
				for _, w := range j.watches {
					w.deliver(st)
				}
			} else if first == nil {
				first = err
			}
		}
		j.mu.Unlock()
	}
	return first
}

// lost reports whether a watch of j has not read its state since it was
// lost; j.mu is held.
func (j *job) lost() bool {
	for _, w := range j.watches {
		if !w.synced {
			return true
		}
	}
	return false
}

// LostJobs returns the names of the jobs with a watch that has not read
// its state since it was lost.
func (h *Hub) LostJobs() []string {
	var names []string
	for _, j := range h.pick(nil) {
		j.mu.Lock()
		if j.lost() {
			names = append(names, j.name)
		}
		j.mu.Unlock()
	}
	return names
}

// Settle returns once the deliveries in progress to the watches of names
// have ended: a source that counts a read as reached while the hub still
// delivers it calls it before its barrier returns.
func (h *Hub) Settle(names ...string) {
	for _, j := range h.pick(names) {
		j.mu.Lock()
		//lint:ignore SA2001 an empty critical section: waiting out the holder is the point
		j.mu.Unlock()
	}
}

// Jobs returns the names of the jobs watched.
func (h *Hub) Jobs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	names := make([]string, 0, len(h.jobs))
	for name := range h.jobs {
		names = append(names, name)
	}
	return names
}

// Sync is the feed's heartbeat; see leasestore.TokenFeed.SyncTokens: the
// source's barrier, then a check that no watch is lost.
func (h *Hub) Sync(ctx context.Context) error {
	if len(h.Jobs()) == 0 {
		return nil
	}
	if err := h.src.Barrier(ctx); err != nil {
		return unavailable("sync tokens", err)
	}
	if lost := h.LostJobs(); len(lost) > 0 {
		return &leasestore.UnavailableError{Op: "sync tokens",
			Err: fmt.Errorf("the watches of %d jobs (%q first) were lost and have not read their state again", len(lost), lost[0])}
	}
	return nil
}

// Close stops every watch and refuses new ones.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	for _, j := range h.pick(nil) {
		j.mu.Lock()
		watches := append([]*watch(nil), j.watches...)
		j.mu.Unlock()
		for _, w := range watches {
			_ = w.Close()
		}
	}
}

// unavailable is err as a leasestore.UnavailableError of op, unless it
// already matches ErrUnavailable.
func unavailable(op string, err error) error {
	if errors.Is(err, leasestore.ErrUnavailable) {
		return err
	}
	return &leasestore.UnavailableError{Op: op, Err: err}
}
