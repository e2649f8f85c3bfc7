package filestore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/noticebook"
)

// Notices are files of their own, <ns>.store/notices/<key>, each a JSON
// record replaced whole (written aside, then renamed into place), so that a
// read without a lock sees one record or the next. Changes are serialised
// by an flock on <ns>.store/notices.lock: notices are not a hot path, and
// one lock keeps a swap's compare and write together across processes.

const (
	noticesDir  = "notices"
	noticesLock = "notices.lock"
)

// notices is the store's notices over its files.
func (e *Store) notices() *noticebook.Book { return &noticebook.Book{Shelf: (*noticeShelf)(e)} }

// PutNotices records notices not yet kept; see leasestore.Notices.
func (e *Store) PutNotices(ctx context.Context, notices []leasestore.Notice) error {
	return e.noticeErr("put notices", e.notices().PutNotices(ctx, notices))
}

// ClaimNotices claims due notices for owner; see leasestore.Notices.
func (e *Store) ClaimNotices(ctx context.Context, owner string, limit int, hold time.Duration) ([]leasestore.Notice, error) {
	list, err := e.notices().ClaimNotices(ctx, owner, limit, hold)
	return list, e.noticeErr("claim notices", err)
}

// SettleNotice ends owner's claim on a notice; see leasestore.Notices.
func (e *Store) SettleNotice(ctx context.Context, key, owner string, s leasestore.Settlement) error {
	return e.noticeErr("settle notice", e.notices().SettleNotice(ctx, key, owner, s))
}

// ListNotices returns the kept notices; see leasestore.Notices.
func (e *Store) ListNotices(ctx context.Context) ([]leasestore.Notice, error) {
	list, err := e.notices().ListNotices(ctx)
	return list, e.noticeErr("list notices", err)
}

// noticeErr maps a file's failure to the contract's error, and leaves the
// rules' refusals and bad requests as they are.
func (e *Store) noticeErr(op string, err error) error {
	var fe *fileError
	if errors.As(err, &fe) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return e.unavailable(op, err)
	}
	return err
}

// noticeShelf is the Store's notice files.
type noticeShelf Store

func (s *noticeShelf) path(key string) string {
	return filepath.Join(s.dataDir, noticesDir, jobKey(key))
}

func (s *noticeShelf) Create(ctx context.Context, key string, rec []byte) (created bool, err error) {
	err = s.locked(ctx, func() error {
		old, err := s.Get(ctx, key)
		if err != nil || old != nil {
			return err
		}
		created = true
		return s.write(s.path(key), rec)
	})
	return created, err
}

func (s *noticeShelf) Get(_ context.Context, key string) ([]byte, error) {
	rec, err := os.ReadFile(s.path(key))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &fileError{s.path(key), err}
	}
	return rec, nil
}

func (s *noticeShelf) Load(context.Context) ([][]byte, error) {
	dir := filepath.Join(s.dataDir, noticesDir)
	names, err := readNames(dir)
	if err != nil {
		return nil, err
	}
	recs := make([][]byte, 0, len(names))
	for _, name := range names {
		if len(name) != 32 {
			continue // a record in the making
		}
		rec, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue // dropped meanwhile
		}
		if err != nil {
			return nil, &fileError{filepath.Join(dir, name), err}
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

func (s *noticeShelf) Swap(ctx context.Context, key string, old, rec []byte) (swapped bool, err error) {
	err = s.locked(ctx, func() error {
		now, err := s.Get(ctx, key)
		if err != nil || now == nil || !bytes.Equal(now, old) {
			return err
		}
		swapped = true
		if rec == nil {
			return removeEntry(s.path(key))
		}
		return s.write(s.path(key), rec)
	})
	return swapped, err
}

// write replaces path's content by rec: written aside, then renamed.
func (s *noticeShelf) write(path string, rec []byte) error {
	e := (*Store)(s)
	tmp := path + tmpSuffix()
	if err := os.WriteFile(tmp, rec, privateFileMode); err != nil {
		return &fileError{path, err}
	}
	if e.access.shared {
		if err := e.share(tmp, sharedFileMode); err != nil {
			_ = os.Remove(tmp)
			return &fileError{path, err}
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return &fileError{path, err}
	}
	return nil
}
