package filestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// A job's operations are serialised by an flock on its record file, which
// every process that shares the store honours; reads take no lock.

// lockJob takes the exclusive flock on key's record file, waiting no longer than ctx allows, and returns the file, which
// holds the lock until it is closed. Without wait, it returns nil, nil when
// another operation holds the lock. The file is opened anew for every
// operation: a lock file that was deleted and re-created meanwhile (the
// folder removed) is detected by its inode and locked again, so two
// processes never hold locks on two different files.
func (e *Store) lockJob(ctx context.Context, key string, wait bool) (*os.File, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("before taking the job's lock: %w", err)
	}
	path := e.recordPath(key)
	for {
		f, err := e.openCreate(path, os.O_RDWR)
		if errors.Is(err, os.ErrNotExist) {
			// The folder does not exist yet, or was removed: start afresh.
			if err := e.mkdirAll(filepath.Dir(path)); err != nil {
				return nil, &fileError{filepath.Dir(path), err}
			}
			f, err = e.openCreate(path, os.O_RDWR)
		}
		if err != nil {
			return nil, &fileError{path, err}
		}
		if !wait {
			if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
				_ = f.Close()
				if errors.Is(err, unix.EWOULDBLOCK) {
					return nil, nil
				}
				return nil, &fileError{path, fmt.Errorf("locking: %w", err)}
			}
		} else if err := flockWait(ctx, f, unix.LOCK_EX); err != nil {
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		same, err := sameFile(f, path)
		if err != nil {
			_ = f.Close()
			return nil, &fileError{path, err}
		}
		if same {
			return f, nil
		}
		_ = f.Close()
	}
}

// flockWait locks f, blocking in the kernel's queue of waiters. When ctx can
// end, the blocking call runs in a goroutine that, if ctx ends first, closes
// the file once the lock is granted so that it is released at once. It
// always consumes f when it fails.
func flockWait(ctx context.Context, f *os.File, how int) error {
	fd := int(f.Fd())
	err := unix.Flock(fd, how|unix.LOCK_NB)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EWOULDBLOCK) {
		_ = f.Close()
		return err
	}
	if ctx.Done() == nil {
		if err := flockBlocking(fd, how); err != nil {
			_ = f.Close()
			return err
		}
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- flockBlocking(fd, how) }()
	select {
	case err := <-done:
		if err != nil {
			_ = f.Close()
		}
		return err
	case <-ctx.Done():
		go func() {
			<-done
			_ = f.Close()
		}()
		return ctx.Err()
	}
}

func flockBlocking(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// sameFile reports whether the open file f is still the file at path.
func sameFile(f *os.File, path string) (bool, error) {
	held, err := f.Stat()
	if err != nil {
		return false, err
	}
	current, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(held, current), nil
}
