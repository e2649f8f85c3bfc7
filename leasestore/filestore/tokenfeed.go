package filestore

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/feed"
)

// Token changes travel like release notifications (notify.go): a grant or
// the end of a run rewrites the one byte of a second file per job, the
// notification file's name with ".t", which the job's first token watcher
// creates. The feed's one file watcher sees the change, and the hub reads
// the job's state from its record. Waiters watch the other file, so a
// grant wakes none of them.
//
// The heartbeat (SyncTokens) reads every watched job again: it also catches
// a change whose poke was lost (a process killed between its write and the
// poke, a notification folder removed).

// feedReadTimeout bounds one read of watched jobs' states by the feed's
// goroutine; a read that fails leaves the watches as they were, and the
// next heartbeat reads them again.
const feedReadTimeout = 5 * time.Second

// tokenPath is the file whose changes signal job's token changes.
func (e *Store) tokenPath(job string) string { return e.notifyPath(job) + ".t" }

// publishToken tells job's token watchers, if any, that its token changed.
func (e *Store) publishToken(job string) { poke(e.tokenPath(job)) }

// WatchTokens starts following job's fencing state; see
// leasestore.TokenFeed.
func (e *Store) WatchTokens(ctx context.Context, job string, fn func(leasestore.TokenState)) (leasestore.TokenWatch, error) {
	src, err := e.tokenSource()
	if err != nil {
		return nil, err
	}
	return src.hub.Watch(ctx, job, fn)
}

// SyncTokens reads every watched job's state again and reports it; see
// leasestore.TokenFeed.
func (e *Store) SyncTokens(ctx context.Context) error {
	e.feedMu.Lock()
	src := e.feed
	e.feedMu.Unlock()
	if src == nil {
		return nil
	}
	return src.hub.Sync(ctx)
}

// tokenSource returns the Store's feed, starting it on first use.
func (e *Store) tokenSource() (*tokenSource, error) {
	e.feedMu.Lock()
	defer e.feedMu.Unlock()
	if e.feedClosed {
		return nil, &leasestore.UnavailableError{Op: "watch tokens", Err: leasestore.ErrClosed}
	}
	if e.feed == nil {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			return nil, &leasestore.UnavailableError{Op: "watch tokens", Err: fmt.Errorf("starting file watcher: %w", err)}
		}
		e.feed = &tokenSource{e: e, w: w, done: make(chan struct{}), jobs: map[string]string{}}
		e.feed.hub = feed.New(e.feed)
		go e.feed.run()
	}
	return e.feed, nil
}

// closeFeed stops the Store's feed, if it was started.
func (e *Store) closeFeed() {
	e.feedMu.Lock()
	src := e.feed
	e.feedClosed = true
	e.feedMu.Unlock()
	if src != nil {
		src.hub.Close()
		_ = src.w.Close()
		<-src.done
	}
}

// tokenSource is the Store's side of its token feed (feed.Source): one
// file watcher for every watched job's token file, and one goroutine (run)
// that tells the hub which job changed.
type tokenSource struct {
	e    *Store
	hub  *feed.Hub
	w    *fsnotify.Watcher
	done chan struct{} // closed when run returns

	mu   sync.Mutex
	jobs map[string]string // token file -> job
}

// Follow watches job's token file, made if need be.
func (f *tokenSource) Follow(_ context.Context, job string) error {
	path := f.e.tokenPath(job)
	if err := f.e.mkdirAll(f.e.notifyDir); err != nil {
		return &fileError{f.e.notifyDir, err}
	}
	file, err := f.e.openCreate(path, os.O_RDONLY)
	if err != nil {
		return &fileError{path, err}
	}
	_ = file.Close()
	f.mu.Lock()
	f.jobs[path] = job
	f.mu.Unlock()
	if err := f.w.Add(path); err != nil {
		return fmt.Errorf("watching %s: %w", path, err)
	}
	return nil
}

// Unfollow stops watching job's token file.
func (f *tokenSource) Unfollow(job string) {
	path := f.e.tokenPath(job)
	f.mu.Lock()
	delete(f.jobs, path)
	f.mu.Unlock()
	_ = f.w.Remove(path)
}

// Read reads job's state from its record, without a lock (file.go), so a
// stopped writer of one job delays no watch of another.
func (f *tokenSource) Read(_ context.Context, job string) (leasestore.TokenState, error) {
	var st leasestore.TokenState
	err := f.e.view("watch tokens", func(t *txn) error {
		doc, err := t.job(job)
		if err != nil {
			return err
		}
		live := doc.LastLive(t.now)
		st = leasestore.TokenState{Job: job, Token: doc.LastToken, Live: live, Read: true}
		return nil
	})
	return st, err
}

// Barrier reads every watched job again: a poke is no proof that every
// change before it was seen.
func (f *tokenSource) Barrier(ctx context.Context) error {
	return f.hub.Reread(ctx, false)
}

// run has the hub read the job whose token file changed, until the watcher
// is closed. A watcher error (an overflowing event queue) may have dropped
// changes: every watch is told so, then read again.
func (f *tokenSource) run() {
	defer close(f.done)
	for {
		select {
		case ev, ok := <-f.w.Events:
			if !ok {
				return
			}
			f.mu.Lock()
			job, watched := f.jobs[ev.Name]
			f.mu.Unlock()
			if watched {
				f.reread(job)
			}
		case _, ok := <-f.w.Errors:
			if !ok {
				return
			}
			f.hub.Lost()
			f.reread()
		}
	}
}

// reread has the hub read jobs (every watched job, when none is named).
func (f *tokenSource) reread(jobs ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), feedReadTimeout)
	defer cancel()
	_ = f.hub.Reread(ctx, false, jobs...)
}
