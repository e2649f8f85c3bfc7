package filestore

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/leasectl/leasectl/leasestore"
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

// StartTokens starts the Store's side of its token feed, one file watcher
// and the goroutine that reads it; see leasestore.Driver.
func (e *Store) StartTokens(_ context.Context, hub *leasestore.TokenHub) (leasestore.TokenSource, error) {
	e.feedMu.Lock()
	defer e.feedMu.Unlock()
	if e.feed != nil {
		return nil, leasestore.ErrFeedStarted
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, &leasestore.UnavailableError{Op: "watch tokens", Err: fmt.Errorf("starting file watcher: %w", err)}
	}
	src := &tokenSource{e: e, hub: hub, w: w, done: make(chan struct{}), jobs: map[string]string{}}
	e.feed = src
	go src.run()
	return src, nil
}

// closeFeed stops the Store's feed, if it was started.
func (e *Store) closeFeed() {
	e.feedMu.Lock()
	src := e.feed
	e.feedMu.Unlock()
	if src != nil {
		_ = src.w.Close()
		<-src.done
	}
}

// tokenSource is the Store's side of its token feed (leasestore.TokenSource): one
// file watcher for every watched job's token file, and one goroutine (run)
// that tells the hub which job changed.
type tokenSource struct {
	e    *Store
	hub  *leasestore.TokenHub
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
