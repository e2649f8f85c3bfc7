package fence

import (
	"context"

	"github.com/leasectl/leasectl/leasestore"
)

// apply merges a state from the feed; it is the watch's fn.
func (e *entry) apply(st leasestore.TokenState) {
	e.mu.Lock()
	defer e.mu.Unlock()
	defer e.publish()
	m := &e.state
	switch {
	case st.Lost:
		m.feedOK = false
		return
	case st.Read:
		// A read replaces what came before; one below the token the feed
		// reported means the store lost that token's record, so its run is
		// not live for the store either.
		m.feedOK = true
		if st.Token >= m.feedToken {
			m.feedToken, m.feedLive = st.Token, st.Live
		} else {
			m.feedLive = false
		}
	case st.Token > m.feedToken:
		m.feedToken, m.feedLive = st.Token, st.Live
	case st.Token == m.feedToken && !st.Live:
		// An end never turns back into a grant.
		m.feedLive = false
	}
	m.job.learn(st.Token, st.Live)
	if !st.Live {
		m.ended(st.Token)
	}
}

// startWatch starts e's watch unless it runs, is starting, or failed less
// than a heartbeat ago. A check does not wait for another's start: until
// the watch has read the job's state, checks ask the store.
func (c *Checker) startWatch(ctx context.Context, e *entry) {
	now := c.clock.Now()
	e.mu.Lock()
	if e.watch != nil || e.watching || e.evicted || (!e.triedAt.IsZero() && now.Sub(e.triedAt) < c.heartbeat) {
		e.mu.Unlock()
		return
	}
	e.watching, e.triedAt = true, now
	e.mu.Unlock()
	// Bounded by a heartbeat: a check that cannot have the watch soon asks
	// the store instead, and the next check after a heartbeat tries again.
	wctx, cancel := context.WithTimeout(ctx, c.heartbeat)
	w, err := c.feed.WatchTokens(wctx, e.job, e.apply)
	cancel()
	e.mu.Lock()
	e.watching = false
	keep := err == nil && !e.evicted
	if keep {
		e.watch = w
		e.watched.Store(true)
	}
	e.mu.Unlock()
	if err == nil && !keep {
		_ = w.Close()
	}
	if keep && c.closed.Load() {
		// Closed meanwhile: Close may have missed this watch.
		closeWatches(e.takeWatch())
	}
}

// takeWatch removes e's watch and returns it, to close.
func (e *entry) takeWatch() []leasestore.TokenWatch {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.watch == nil {
		return nil
	}
	w := e.watch
	e.watch = nil
	e.watched.Store(false)
	return []leasestore.TokenWatch{w}
}

// closeWatches closes ws; it is never called with an entry's lock held,
// since Close waits for a running fn, which takes it.
func closeWatches(ws []leasestore.TokenWatch) {
	for _, w := range ws {
		_ = w.Close()
	}
}

// beat runs the feed's heartbeat at once and then every c.heartbeat, until
// ctx is cancelled; a heartbeat that succeeds moves syncedAt to its start.
func (c *Checker) beat(ctx context.Context) {
	defer close(c.done)
	for {
		start := c.clock.Now()
		sctx, cancel := context.WithTimeout(ctx, c.maxLag)
		err := c.feed.SyncTokens(sctx)
		cancel()
		if err == nil {
			c.syncedAt.Store(c.since(start))
		}
		next := c.clock.NewTimer(c.heartbeat)
		select {
		case <-ctx.Done():
			next.Stop()
			return
		case <-next.C():
		}
	}
}
