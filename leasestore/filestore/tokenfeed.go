package filestore

import (
	"context"
	"errors"
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
// creates. The feed's one file watcher sees the change and reads the job's
// state from its record. Waiters watch the other file, so a grant wakes
// none of them.
//
// The heartbeat (SyncTokens) reads every watched job again: it also catches
// a change whose poke was lost (a process killed between its write and the
// poke, a notification folder removed).

// feedReadTimeout bounds one read of watched jobs' states by the feed's
// goroutine; a read that fails reports the watch lost until the next one.
const feedReadTimeout = 5 * time.Second

var _ leasestore.TokenFeed = (*Store)(nil)

// tokenPath is the file whose changes signal job's token changes.
func (e *Store) tokenPath(job string) string { return e.notifyPath(job) + ".t" }

// publishToken tells job's token watchers, if any, that its token changed.
func (e *Store) publishToken(job string) { poke(e.tokenPath(job)) }

// WatchTokens starts following job's fencing state; see
// leasestore.TokenFeed.
func (e *Store) WatchTokens(ctx context.Context, job string, fn func(leasestore.TokenState)) (leasestore.TokenWatch, error) {
	f, err := e.tokenFeed()
	if err != nil {
		return nil, err
	}
	return f.watch(ctx, job, fn)
}

// SyncTokens reads every watched job's state again and reports it; see
// leasestore.TokenFeed.
func (e *Store) SyncTokens(ctx context.Context) error {
	e.feedMu.Lock()
	f := e.feed
	e.feedMu.Unlock()
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.readAll(ctx)
}

// tokenFeed returns the Store's feed, starting it on first use.
func (e *Store) tokenFeed() (*tokenFeed, error) {
	e.feedMu.Lock()
	defer e.feedMu.Unlock()
	if e.feedClosed {
		return nil, &leasestore.UnavailableError{Op: "watch tokens", Err: errors.New("the store is closed")}
	}
	if e.feed == nil {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			return nil, &leasestore.UnavailableError{Op: "watch tokens", Err: fmt.Errorf("starting file watcher: %w", err)}
		}
		e.feed = &tokenFeed{e: e, w: w, done: make(chan struct{}), watches: map[string][]*tokenWatch{}}
		go e.feed.run()
	}
	return e.feed, nil
}

// closeFeed stops the Store's feed, if it was started.
func (e *Store) closeFeed() {
	e.feedMu.Lock()
	f := e.feed
	e.feedClosed = true
	e.feedMu.Unlock()
	if f != nil {
		_ = f.w.Close()
		<-f.done
	}
}

// tokenFeed is the Store's leasestore.TokenFeed: one file watcher for every
// watched job's token file, and one goroutine (run) that reads the states.
type tokenFeed struct {
	e    *Store
	w    *fsnotify.Watcher
	done chan struct{} // closed when run returns

	// mu guards watches and is held while states are read and delivered,
	// so that each watch gets them in the order they were read.
	mu      sync.Mutex
	watches map[string][]*tokenWatch // by token file
}

// tokenWatch is one watch of one job.
type tokenWatch struct {
	f    *tokenFeed
	job  string
	path string
	fn   func(leasestore.TokenState)
}

// watch adds a watch of job and reports its first state.
func (f *tokenFeed) watch(ctx context.Context, job string, fn func(leasestore.TokenState)) (leasestore.TokenWatch, error) {
	unavailable := func(what string, err error) error {
		return &leasestore.UnavailableError{Op: "watch tokens", Err: fmt.Errorf("%s: %w", what, err)}
	}
	path := f.e.tokenPath(job)
	if err := f.e.mkdirAll(f.e.notifyDir); err != nil {
		return nil, f.e.unavailable("watch tokens", &fileError{f.e.notifyDir, err})
	}
	file, err := f.e.openCreate(path, os.O_RDONLY)
	if err != nil {
		return nil, f.e.unavailable("watch tokens", &fileError{path, err})
	}
	_ = file.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.watches[path]) == 0 {
		// Watched before the read: a change after the read is seen.
		if err := f.w.Add(path); err != nil {
			return nil, unavailable("watching "+path, err)
		}
	}
	st, err := f.e.readTokens(ctx, []string{job})
	if err != nil {
		if len(f.watches[path]) == 0 {
			_ = f.w.Remove(path)
		}
		return nil, err
	}
	w := &tokenWatch{f: f, job: job, path: path, fn: fn}
	f.watches[path] = append(f.watches[path], w)
	w.fn(st[0])
	return w, nil
}

// Close stops the watch; fn is not called once it has returned.
func (w *tokenWatch) Close() error {
	f := w.f
	f.mu.Lock()
	defer f.mu.Unlock()
	list := f.watches[w.path]
	for i, o := range list {
		if o == w {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) > 0 {
		f.watches[w.path] = list
		return nil
	}
	delete(f.watches, w.path)
	_ = f.w.Remove(w.path)
	return nil
}

// run reads the state of a job whose token file changed, until the watcher
// is closed. A watcher error (an overflowing event queue) may have dropped
// changes: every watch is told so, then read again.
func (f *tokenFeed) run() {
	defer close(f.done)
	for {
		select {
		case ev, ok := <-f.w.Events:
			if !ok {
				return
			}
			f.changed(ev.Name)
		case _, ok := <-f.w.Errors:
			if !ok {
				return
			}
			f.mu.Lock()
			f.each(func(w *tokenWatch) { w.fn(leasestore.TokenState{Job: w.job, Lost: true}) })
			ctx, cancel := context.WithTimeout(context.Background(), feedReadTimeout)
			_ = f.readAll(ctx)
			cancel()
			f.mu.Unlock()
		}
	}
}

// changed reads and reports the state of the job whose token file is path.
func (f *tokenFeed) changed(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	list := f.watches[path]
	if len(list) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), feedReadTimeout)
	defer cancel()
	st := leasestore.TokenState{Job: list[0].job, Lost: true}
	if read, err := f.e.readTokens(ctx, []string{list[0].job}); err == nil {
		st = read[0]
	}
	for _, w := range list {
		w.fn(st)
	}
}

// each calls do for every watch; f.mu is held.
func (f *tokenFeed) each(do func(*tokenWatch)) {
	for _, list := range f.watches {
		for _, w := range list {
			do(w)
		}
	}
}

// readAll reads every watched job's state in one transaction and reports
// it, or reports every watch lost when the read fails; f.mu is held.
func (f *tokenFeed) readAll(ctx context.Context) error {
	var jobs []string
	for _, list := range f.watches {
		jobs = append(jobs, list[0].job)
	}
	if len(jobs) == 0 {
		return nil
	}
	states, err := f.e.readTokens(ctx, jobs)
	if err != nil {
		f.each(func(w *tokenWatch) { w.fn(leasestore.TokenState{Job: w.job, Lost: true}) })
		return err
	}
	byJob := make(map[string]leasestore.TokenState, len(states))
	for _, st := range states {
		byJob[st.Job] = st
	}
	f.each(func(w *tokenWatch) { w.fn(byJob[w.job]) })
	return nil
}

// readTokens reads jobs' states, in the order of jobs: one record at a
// time, without a lock (file.go), so a stopped writer of one job delays
// none of them.
func (e *Store) readTokens(_ context.Context, jobs []string) ([]leasestore.TokenState, error) {
	states := make([]leasestore.TokenState, len(jobs))
	err := e.view("watch tokens", func(t *txn) error {
		for i, job := range jobs {
			doc, err := t.job(job)
			if err != nil {
				return err
			}
			live := doc.LastLive(t.now)
			states[i] = leasestore.TokenState{Job: job, Token: doc.LastToken, Live: live, Read: true}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return states, nil
}
