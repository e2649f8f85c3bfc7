package filestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// The embedded store keeps each job in files of its own, so that nothing
// one job's operation holds is ever waited for by another job's: a process
// stopped (SIGSTOP, a long pause) inside an operation costs its own job and
// no other. A namespace's files, in the store folder:
//
//	<ns>.store/jobs/<key>                   the job's record, and its lock
//	<ns>.store/inflight/<h>/<µs>.<key>      a link to it while the job has a run
//	<ns>.store/quarantined/<key>            a link to it while the job is quarantined
//	<ns>.store/due/<h>/<µs>.<key>           a link to it while the job has an
//	                                        expectation, named by its due time
//	<ns>.notify/<key>                       release notifications (notify.go)
//
// <key> is a hash of the job ID (job IDs may hold '/' and be longer than a
// file name may be); the record holds the ID itself.
//
// An operation that changes a job takes a blocking flock on the job's
// record file (the kernel queues the waiters and wakes the next one the
// moment the lock is free), reads the record and writes the new one in
// place, into a slot other than the current record's. Each slot opens with a
// header carrying a sequence number, the length and a checksum, so that the
// newest whole slot is the record: a writer killed halfway leaves the
// previous slot intact, and reads take no lock at all and never wait, not
// even for a stopped writer of the same job (a read that meets a slot being
// written finds its checksum wrong and takes the previous one).
//
// The in-flight entries and the quarantine folder are indexes for the
// store-wide views (Scan, Leases, Counts, Quarantined), which read them
// without a lock and then one record at a time. The record is the truth and
// the index a superset of it: an entry is put where a record needs it before
// that record is written, and taken away after the record that no longer
// needs it is, so a process killed in between leaves an entry too many,
// never one too few; the views check each entry against its record, and
// Scan puts stray entries back. An in-flight entry is named by the run's
// liveness expiry in microseconds and sits in the folder of the hour it
// falls in, so Scan reads only the hours that have begun: its cost follows
// the runs that expire within the hour, not all the runs in flight.
//
// Files are created once per job (and folders once per hour); every later
// write is an in-place write, or a link, unlink or rename of an index entry,
// which are hard links to the job's record file and allocate nothing: on ext4,
// creating and removing files costs 0.1–0.4 ms each on the 2-core reference
// machine and replacing a file by renaming another over it 0.6 ms (the file
// system flushes the new file's data first), against 5 µs for an in-place
// write or a rename. Entries stay out of the jobs folder, whose size grows
// with every job the store has seen.
//
// Durability: nothing is fsynced. `leasectl run -- true` writes twice
// (acquire, release), and fsyncs would cost 0.3 ms per write on an idle disk
// and 1–2.5 ms on a busy one (cloud block storage syncs in 1–3 ms). What
// that gives up is narrow: a supervisor that dies, even by SIGKILL, loses
// nothing, since its writes are in the page cache, which the kernel writes
// back; only a host crash or power loss can lose the last seconds of writes
// or damage a record's slots (Unavailable for that job, with a message to
// move its file away). A host crash also ends every child holding a
// local lease, so no two holders can overlap through the lost writes, and
// fencing tokens keep rising because a token is never below the clock in
// microseconds. What can be lost is recent history, crash counts and
// quarantines, as with a Redis without persistence that restarts.

// Folders of a namespace's store folder.
const (
	jobsDir        = "jobs"
	inFlightDir    = "inflight"
	quarantinedDir = "quarantined"
	dueDir         = "due"
)

// windowMicros is the span of expiries one in-flight folder holds: an
// hour. Longer would make Scan read more live entries; shorter would make
// a folder for nearly every run of a job that runs alone.
const windowMicros = int64(time.Hour / time.Microsecond)

// corruptError means a record's content cannot be trusted; err says what
// was found.
type corruptError struct{ err error }

func (e *corruptError) Error() string { return e.err.Error() }
func (e *corruptError) Unwrap() error { return e.err }

// fileError is a failure of the file at path.
type fileError struct {
	path string
	err  error
}

func (e *fileError) Error() string { return e.path + ": " + e.err.Error() }
func (e *fileError) Unwrap() error { return e.err }

// txn is one operation, with the store's clock read once.
type txn struct {
	e      *Store
	now    time.Time
	notify []string // jobs whose waiters to wake once the job's lock is released
	tokens []string // jobs whose token watchers to tell once the job's lock is released
	// stray are in-flight entries of the job that its record does not
	// need, found by Scan, to remove under the job's lock.
	stray []string
}

// jobKey names job's files.
func jobKey(job string) string {
	sum := sha256.Sum256([]byte(job))
	return hex.EncodeToString(sum[:16])
}

// recordPath is the path of key's record file.
func (e *Store) recordPath(key string) string { return filepath.Join(e.dataDir, jobsDir, key) }

func (e *Store) quarantinePath(key string) string {
	return filepath.Join(e.dataDir, quarantinedDir, key)
}

// inFlightPath is the index entry of key's run whose liveness expires at
// liveUntil.
func (e *Store) inFlightPath(key string, liveUntil time.Time) string {
	us := liveUntil.UnixMicro()
	return filepath.Join(e.dataDir, inFlightDir, strconv.FormatInt(us/windowMicros, 10), strconv.FormatInt(us, 10)+"."+key)
}

// update runs fn on job's record under the job's lock, waiting for the lock
// no longer than ctx allows, and writes the record back if fn changed it:
// also when fn returns a refusal (such as *HeldError), so that what fn did
// before refusing stays done, but not on a storage error. Release
// notifications and token changes fn queued are published after the lock
// is released.
func (e *Store) update(ctx context.Context, op, job string, fn func(t *txn, doc *jobDoc) error) error {
	return e.updateKey(ctx, op, jobKey(job), job, true, fn)
}

// updateKey is update for the job whose files are named key. job is the
// job's ID, or "" when the caller knows only the key (Scan): fn then gets
// the record as it is, one with no ID if there is none. Without wait, it
// does nothing when another operation holds the lock.
func (e *Store) updateKey(ctx context.Context, op, key, job string, wait bool, fn func(t *txn, doc *jobDoc) error) error {
	lock, err := e.lockJob(ctx, key, wait)
	var fe *fileError
	switch {
	case errors.As(err, &fe):
		return e.unavailable(op, err)
	case err != nil:
		return &leasestore.UnavailableError{Op: op, Err: err}
	}
	if lock == nil {
		return nil
	}
	t := &txn{e: e, now: e.clock()}
	result, err := e.change(lock, key, job, t, fn)
	// Closing the last descriptor of the lock file releases the flock.
	_ = lock.Close()
	if err != nil {
		return e.unavailable(op, err)
	}
	for _, id := range t.notify {
		e.publish(id)
	}
	for _, id := range t.tokens {
		e.publishToken(id)
	}
	return result
}

// change reads key's record through lock (its file, locked), lets fn
// change it, and writes it back if it changed, keeping the index a superset
// of the records. It returns fn's result and, apart, a storage failure.
func (e *Store) change(lock *os.File, key, job string, t *txn, fn func(t *txn, doc *jobDoc) error) (result, err error) {
	rec, err := readRecord(e.recordPath(key), lock, job)
	if err != nil {
		return nil, err
	}
	doc := rec.doc
	before := doc.index()
	result = fn(t, doc)
	after := doc.index()
	var v []byte
	if doc.Job != "" {
		if v, err = doc.encode(); err != nil {
			return nil, &fileError{e.recordPath(key), fmt.Errorf("encoding: %w", err)}
		}
	}
	if v == nil || string(v) == string(rec.body) {
		// Unchanged (a refusal), or no record at all: only strays to
		// remove.
		return result, removeStray(t.stray)
	}
	target := lock.Name()
	added, removed := missing(after.liveUntil, before.liveUntil), missing(before.liveUntil, after.liveUntil)
	if len(added) == 1 && len(removed) == 1 {
		// A run renewed: its entry moves.
		if err := e.moveEntry(target, e.inFlightPath(key, removed[0]), e.inFlightPath(key, added[0])); err != nil {
			return nil, err
		}
		added, removed = nil, nil
	}
	for _, at := range added {
		if err := e.link(target, e.inFlightPath(key, at)); err != nil {
			return nil, err
		}
	}
	if after.quarantined && !before.quarantined {
		if err := e.link(target, e.quarantinePath(key)); err != nil {
			return nil, err
		}
	}
	if err := e.indexDue(target, key, before.due, after.due); err != nil {
		return nil, err
	}
	if err := rec.write(lock, v); err != nil {
		return nil, err
	}
	for _, at := range removed {
		if err := removeEntry(e.inFlightPath(key, at)); err != nil {
			return nil, err
		}
	}
	if before.quarantined && !after.quarantined {
		if err := removeEntry(e.quarantinePath(key)); err != nil {
			return nil, err
		}
	}
	if !before.due.IsZero() && !after.due.Equal(before.due) {
		if err := removeEntry(e.duePath(key, before.due)); err != nil {
			return nil, err
		}
	}
	return result, removeStray(t.stray)
}

// removeStray removes in-flight entries that no record needs.
func removeStray(stray []string) error {
	for _, path := range stray {
		if err := removeEntry(path); err != nil {
			return err
		}
	}
	return nil
}

// indexed is what the indexes hold of a record.
type indexed struct {
	liveUntil   []time.Time // the record's runs, each indexed by its liveness expiry
	quarantined bool
	due         time.Time // the expectation's due time; zero: none
}

func (d *jobDoc) index() indexed {
	x := indexed{quarantined: d.Quarantine != nil, due: rules.Due(&d.Record)}
	for _, u := range d.Runs {
		x.liveUntil = append(x.liveUntil, u.LiveUntil)
	}
	return x
}

// missing is the times of a that b does not hold.
func missing(a, b []time.Time) []time.Time {
	var m []time.Time
	for _, at := range a {
		if !slices.ContainsFunc(b, at.Equal) {
			m = append(m, at)
		}
	}
	return m
}

// view runs fn with the store's clock, for operations that only read:
// they read records with t.job, without any lock.
func (e *Store) view(op string, fn func(t *txn) error) error {
	t := &txn{e: e, now: e.clock()}
	err := fn(t)
	var fe *fileError
	var ce *corruptError
	if errors.As(err, &fe) || errors.As(err, &ce) {
		return e.unavailable(op, err)
	}
	return err
}

// job reads job's record without a lock; a job the store never saw has a
// zero one. The store's clock is read again after the record, so that
// the times the record holds are never later than t.now.
func (t *txn) job(job string) (*jobDoc, error) {
	return t.readKey(jobKey(job), job)
}

// readKey reads key's record without a lock, as job does; job is its ID if
// known, else "".
func (t *txn) readKey(key, job string) (*jobDoc, error) {
	rec, err := readRecord(t.e.recordPath(key), nil, job)
	t.now = t.e.clock()
	if err != nil {
		return nil, err
	}
	return rec.doc, nil
}

// link makes the index entry at path, a hard link to the job's record file
// at target, and its folder if need be. An entry already there is fine. A
// folder removed again between its making and the link (the due index's
// folders of hours passed, which Overdue removes when empty) is made again.
func (e *Store) link(target, path string) error {
	err := os.Link(target, path)
	for range 3 {
		if !errors.Is(err, os.ErrNotExist) {
			break
		}
		if err = e.mkdirEntries(filepath.Dir(path)); err != nil {
			return err
		}
		err = os.Link(target, path)
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return &fileError{path, err}
	}
	return nil
}

// moveEntry moves an index entry from src to dst. An entry missing at src
// (a process was killed after moving it and before writing the record that
// named it) is made anew at dst, as a link to target.
func (e *Store) moveEntry(target, src, dst string) error {
	err := os.Rename(src, dst)
	if errors.Is(err, os.ErrNotExist) {
		// Either dst's folder or src is missing.
		if err := e.mkdirEntries(filepath.Dir(dst)); err != nil {
			return err
		}
		err = os.Rename(src, dst)
		if errors.Is(err, os.ErrNotExist) {
			return e.link(target, dst)
		}
	}
	if err != nil {
		return &fileError{dst, err}
	}
	return nil
}

// mkdirEntries makes a folder of index entries. A new hour's in-flight
// folder is the moment to remove the folders of the hours wholly passed.
func (e *Store) mkdirEntries(dir string) error {
	err := e.mkdir(dir)
	if errors.Is(err, os.ErrNotExist) {
		err = e.mkdirAll(dir)
	}
	switch {
	case err == nil:
		if filepath.Dir(dir) == filepath.Join(e.dataDir, inFlightDir) {
			e.removePassedWindows()
		}
		return nil
	case errors.Is(err, os.ErrExist):
		return nil
	default:
		return &fileError{dir, err}
	}
}

// removePassedWindows removes the in-flight folders of hours wholly passed
// that hold no entry any more: called by whoever made a new hour's folder,
// and by Scan, so that they do not pile up on a host without a reaper. A
// folder that still holds an entry (a crash not counted yet) stays.
func (e *Store) removePassedWindows() {
	root := filepath.Join(e.dataDir, inFlightDir)
	names, _ := readNames(root)
	now := e.clock().UnixMicro()
	for _, name := range names {
		if w, err := strconv.ParseInt(name, 10, 64); err == nil && (w+1)*windowMicros <= now {
			_ = os.Remove(filepath.Join(root, name))
		}
	}
}

// removeEntry removes the index entry at path; one already gone is fine.
func removeEntry(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return &fileError{path, err}
	}
	return nil
}

// unavailable wraps a storage failure in an *UnavailableError whose one-line
// message names the file and, where the operator can do something, what.
func (e *Store) unavailable(op string, err error) error {
	path := e.dataDir
	var fe *fileError
	if errors.As(err, &fe) {
		path, err = fe.path, fe.err
	}
	var msg error
	var corrupt *corruptError
	switch {
	case errors.As(err, &corrupt):
		msg = fmt.Errorf("embedded store file %s is corrupt (%w): move it away (mv %s %s.corrupt) and leasectl starts afresh for that job; its fencing tokens keep rising",
			path, err, path, path)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		msg = fmt.Errorf("disk full writing embedded store file %s: free some space (%w)", path, err)
	case errors.Is(err, syscall.EROFS):
		msg = fmt.Errorf("embedded store file %s is on a read-only file system (%w)", path, err)
	case errors.Is(err, os.ErrPermission):
		msg = errors.New("embedded store file " + permissionHint(path, e.dir, e.access))
	default:
		msg = fmt.Errorf("embedded store file %s: %w", path, err)
	}
	return &leasestore.UnavailableError{Op: op, Err: msg}
}

// inFlightEntry is one entry of the in-flight index.
type inFlightEntry struct {
	key       string
	liveUntil time.Time
	path      string
}

// inFlight lists the in-flight index entries whose liveness expiry is at or
// before now (expired) or after it (live), reading only the folders of the
// hours that can hold them.
func (e *Store) inFlight(now time.Time, expired bool) ([]inFlightEntry, error) {
	var entries []inFlightEntry
	root := filepath.Join(e.dataDir, inFlightDir)
	windows, err := readNames(root)
	if err != nil {
		return nil, err
	}
	nowUS := now.UnixMicro()
	for _, s := range windows {
		w, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			continue // not an index folder: leave it alone
		}
		// Folder w holds the expiries in [w, w+1) windows.
		start, end := w*windowMicros, (w+1)*windowMicros
		if expired && start > nowUS || !expired && end <= nowUS+1 {
			continue
		}
		dir := filepath.Join(root, s)
		names, err := readNames(dir)
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			us, key, ok := strings.Cut(name, ".")
			at, err := strconv.ParseInt(us, 10, 64)
			if !ok || err != nil || len(key) != 32 {
				continue
			}
			if (at <= nowUS) == expired {
				entries = append(entries, inFlightEntry{key: key, liveUntil: time.UnixMicro(at).UTC(), path: filepath.Join(dir, name)})
			}
		}
	}
	return entries, nil
}

// readNames lists the names in dir, none if it does not exist.
func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &fileError{dir, err}
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, &fileError{dir, err}
	}
	return names, nil
}

// keys returns the distinct keys of entries, sorted.
func keys(entries []inFlightEntry) []string {
	var ks []string
	for _, en := range entries {
		ks = append(ks, en.key)
	}
	slices.Sort(ks)
	return slices.Compact(ks)
}
