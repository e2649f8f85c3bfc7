package leasestore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// TokenSource is a driver's side of its token feed, under the TokenHub
// that the portable Store owns: how it learns of changes (pub/sub,
// LISTEN/NOTIFY, a watch stream, a file poke), how it reads a job's state,
// and its barrier.
type TokenSource interface {
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
	Read(ctx context.Context, job string) (TokenState, error)
	// Barrier returns once every change committed before the call has been
	// handed to the hub, and the jobs the source had lost since have been
	// read again (Reread); an error matching ErrUnavailable when
	// that could not be shown within ctx.
	Barrier(ctx context.Context) error
}

// TokenHub is the portable half of every store's token feed (TokenFeed),
// over the driver's TokenSource: the watches and their fan-out, the one
// rule that leaves out what a watch already knows, the
// lost-then-read-again sequence, and the heartbeat's last check. The
// portable Store owns it; a driver's source hands it what it hears
// (Publish, Lost, Reread). Its methods are safe for concurrent use.
type TokenHub struct {
	// src is set once, under mu, when the driver's source has started:
	// the source may call the hub from its own goroutines before.
	src TokenSource

	// deliver is held while a fn runs: one call at a time per store, as
	// TokenFeed promises.
	deliver sync.Mutex

	mu   sync.Mutex
	jobs map[string]*hubJob
	// closed is set under mu by Close, and read under a job's mu too.
	closed atomic.Bool
}

// hubJob is the watches of one job.
type hubJob struct {
	name string
	// follow is held while the job is being followed (TokenSource.Follow) and
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
	hub    *TokenHub
	job    *hubJob
	fn     func(TokenState)
	closed bool
	// synced: fn has had a read since the watch started or was lost;
	// changes published meanwhile are left out (the read includes them).
	synced bool
	last   TokenState // what fn was last called with
}

// errClosedHub refuses a watch on a closed hub.
func errClosedHub() error { return &UnavailableError{Op: "watch tokens", Err: ErrClosed} }

// newTokenHub returns a hub without its source, which is attached before
// the first watch.
func newTokenHub() *TokenHub { return &TokenHub{jobs: map[string]*hubJob{}} }

// attach makes src the hub's source.
func (h *TokenHub) attach(src TokenSource) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.src = src
}

// source is the hub's source; no job's mu may be held.
func (h *TokenHub) source() TokenSource {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.src
}

// Watch starts following job for fn; see TokenFeed.WatchTokens.
func (h *TokenHub) Watch(ctx context.Context, name string, fn func(TokenState)) (TokenWatch, error) {
	j, err := h.lockJob(name)
	if err != nil {
		return nil, err
	}
	defer j.follow.Unlock()
	src := h.source()
	j.mu.Lock()
	first := len(j.watches) == 0
	j.mu.Unlock()
	if first {
		if err := src.Follow(ctx, name); err != nil {
			h.forget(j)
			return nil, asUnavailable("watch tokens", err)
		}
	}
	w := &watch{hub: h, job: j, fn: fn}
	j.mu.Lock()
	// Checked again under j.mu: Close may have passed this job while it was
	// being followed, and would not see a watch added now.
	var st TokenState
	err = errClosedHub()
	if !h.closed.Load() {
		st, err = src.Read(ctx, name)
	}
	if err == nil {
		j.watches = append(j.watches, w)
		w.deliver(st)
	}
	j.mu.Unlock()
	if err != nil {
		if first {
			src.Unfollow(name)
			h.forget(j)
		}
		return nil, asUnavailable("watch tokens", err)
	}
	return w, nil
}

// lockJob returns the watches of name, made if need be, with their follow
// lock held.
func (h *TokenHub) lockJob(name string) (*hubJob, error) {
	for {
		h.mu.Lock()
		if h.closed.Load() {
			h.mu.Unlock()
			return nil, errClosedHub()
		}
		j := h.jobs[name]
		if j == nil {
			j = &hubJob{name: name}
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
func (h *TokenHub) forget(j *hubJob) {
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
		w.hub.source().Unfollow(j.name)
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
func (w *watch) deliver(st TokenState) {
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
func (h *TokenHub) Publish(st TokenState) {
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
func (h *TokenHub) job(name string) *hubJob {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.jobs[name]
}

// Lost tells the watches of names (of every job, when names is empty)
// that changes may have been missed: each gets a Lost state, and no change
// until its next read (Reread).
func (h *TokenHub) Lost(names ...string) {
	for _, j := range h.pick(names) {
		j.mu.Lock()
		for _, w := range j.watches {
			if w.synced && !w.closed {
				w.synced = false
				w.last = TokenState{Job: j.name, Lost: true}
				h.deliver.Lock()
				w.fn(w.last)
				h.deliver.Unlock()
			}
		}
		j.mu.Unlock()
	}
}

// pick returns the jobs named, or every job when names is empty.
func (h *TokenHub) pick(names []string) []*hubJob {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*hubJob
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
func (h *TokenHub) Reread(ctx context.Context, lostOnly bool, names ...string) error {
	var first error
	src := h.source()
	for _, j := range h.pick(names) {
		j.mu.Lock()
		if !lostOnly || j.lost() {
			st, err := src.Read(ctx, j.name)
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
func (j *hubJob) lost() bool {
	for _, w := range j.watches {
		if !w.synced {
			return true
		}
	}
	return false
}

// LostJobs returns the names of the jobs with a watch that has not read
// its state since it was lost.
func (h *TokenHub) LostJobs() []string {
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
func (h *TokenHub) Settle(names ...string) {
	for _, j := range h.pick(names) {
		j.mu.Lock()
		//lint:ignore SA2001 an empty critical section: waiting out the holder is the point
		j.mu.Unlock()
	}
}

// Jobs returns the names of the jobs watched.
func (h *TokenHub) Jobs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	names := make([]string, 0, len(h.jobs))
	for name := range h.jobs {
		names = append(names, name)
	}
	return names
}

// Sync is the feed's heartbeat; see TokenFeed.SyncTokens: the
// source's barrier, then a check that no watch is lost.
func (h *TokenHub) Sync(ctx context.Context) error {
	if len(h.Jobs()) == 0 {
		return nil
	}
	if err := h.source().Barrier(ctx); err != nil {
		return asUnavailable("sync tokens", err)
	}
	if lost := h.LostJobs(); len(lost) > 0 {
		return &UnavailableError{Op: "sync tokens",
			Err: fmt.Errorf("the watches of %d jobs (%q first) were lost and have not read their state again", len(lost), lost[0])}
	}
	return nil
}

// Close stops every watch and refuses new ones.
func (h *TokenHub) Close() {
	h.mu.Lock()
	h.closed.Store(true)
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

// asUnavailable is err as an *UnavailableError of op, unless it already
// matches ErrUnavailable.
func asUnavailable(op string, err error) error {
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	return &UnavailableError{Op: op, Err: err}
}
