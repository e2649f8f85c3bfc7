package filestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"

	"github.com/leasectl/leasectl/leasestore"
)

// Release notifications of the embedded store travel through the file
// system: each job has a small file in the namespace's notify folder, named
// by a hash of the job ID (job IDs may hold '/' and be longer than a file
// name may be). A subscriber creates the file and watches it; a release
// rewrites its one byte, which inotify and kqueue report at once.
//
// The file is watched rather than its folder, and it is kept rather than
// created and removed per release: kqueue reports a folder change without
// the name, and fsnotify finds the name by reading the folder, so a file
// already removed again would go unseen on macOS; watching a folder on
// kqueue would also hold one descriptor per file in it.

// notifyPath is the file whose changes signal job's releases.
func (e *Store) notifyPath(job string) string {
	sum := sha256.Sum256([]byte(job))
	return filepath.Join(e.notifyDir, hex.EncodeToString(sum[:16]))
}

// publish wakes job's subscribers. It writes only to a file a subscriber
// created, so jobs nobody ever waited for leave no file behind. A failure is
// not reported: notifications only speed waiters up, who wake anyway when
// the holder's lease would expire.
func (e *Store) publish(job string) { poke(e.notifyPath(job)) }

// poke rewrites the one byte of the notification file at path, if a
// subscriber or a token watcher created it.
func poke(path string) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return
	}
	_, _ = f.WriteAt([]byte{'\n'}, 0)
	_ = f.Close()
}

// Subscribe starts delivering job's release notifications. It returns once
// the watch is in place, so every release after it is delivered. The
// subscription lasts until Close; ctx bounds only this call.
func (e *Store) Subscribe(ctx context.Context, job, _ string) (leasestore.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, &leasestore.UnavailableError{Op: "subscribe", Err: err}
	}
	path := e.notifyPath(job)
	if err := e.mkdirAll(e.notifyDir); err != nil {
		return nil, e.unavailable("subscribe", &fileError{e.notifyDir, err})
	}
	f, err := e.openCreate(path, os.O_RDONLY)
	if err != nil {
		return nil, e.unavailable("subscribe", &fileError{path, err})
	}
	_ = f.Close()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, &leasestore.UnavailableError{Op: "subscribe", Err: fmt.Errorf("starting file watcher: %w", err)}
	}
	if err := w.Add(path); err != nil {
		_ = w.Close()
		return nil, &leasestore.UnavailableError{Op: "subscribe", Err: fmt.Errorf("watching %s: %w", path, err)}
	}
	s := &fileSubscription{w: w, released: make(chan struct{}, 1)}
	s.wg.Add(1)
	go s.run()
	return s, nil
}

// fileSubscription turns a file watcher's events into release
// notifications.
type fileSubscription struct {
	w        *fsnotify.Watcher
	released chan struct{}
	wg       sync.WaitGroup
	once     sync.Once
	err      error
}

// run forwards every event and error of the watcher as a wake-up: a spurious
// one costs the waiter one refused Acquire, a missed one costs it a lease
// TTL. It ends when the watcher is closed.
func (s *fileSubscription) run() {
	defer s.wg.Done()
	for {
		select {
		case _, ok := <-s.w.Events:
			if !ok {
				return
			}
		case _, ok := <-s.w.Errors:
			if !ok {
				return
			}
		}
		select {
		case s.released <- struct{}{}:
		default:
		}
	}
}

// Released receives a value after a release; values coalesce.
func (s *fileSubscription) Released() <-chan struct{} { return s.released }

// Close stops the watcher. It is safe to call more than once.
func (s *fileSubscription) Close() error {
	s.once.Do(func() {
		s.err = s.w.Close()
		s.wg.Wait()
	})
	return s.err
}
