package filestore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// locked runs fn under the notices' flock.
func (s *noticeShelf) locked(ctx context.Context, fn func() error) error {
	e := (*Store)(s)
	if err := e.mkdirAll(filepath.Join(e.dataDir, noticesDir)); err != nil {
		return &fileError{e.dataDir, err}
	}
	path := filepath.Join(e.dataDir, noticesLock)
	f, err := e.openCreate(path, os.O_RDWR)
	if err != nil {
		return &fileError{path, err}
	}
	if err := flockWait(ctx, f, unix.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", path, err)
	}
	defer f.Close()
	return fn()
}
