package leasestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"
)

// The embedded store's file is opened for one transaction at a time and
// closed at once, so that many leasectl processes on one host share it. The
// lock that orders them is a blocking flock on a separate lock file: the
// kernel queues the waiters and wakes the next one the moment the lock is
// free. bbolt's own lock on the database file is taken without waiting,
// since whoever holds the lock file is the only one opening the database
// (bbolt polls its lock every 50 ms, far too slow for a lease handoff).
//
// Durability: the file is written without fsync (bbolt's NoSync). bbolt
// fdatasyncs twice per commit, and `leasectl run -- true` commits twice
// (acquire, release). Measured on the 2-core reference machine, a commit's
// syncs cost 0.3 ms when the disk is idle but 1–2.5 ms while other
// processes write (builds, other tests): acquire, `true` and release in a
// bare binary took 3.7 ms instead of 3.1 ms on the idle disk, and 9 ms
// instead of 4 ms on the busy one (`flock -n f true`: 2 ms). Cloud block
// storage syncs in 1–3 ms.
// What NoSync gives up is narrow: a supervisor that dies, even by SIGKILL,
// loses nothing, since its writes are in the page cache, which the kernel
// writes back; only a host crash or power loss can lose the last seconds of
// writes or leave the file corrupt (Unavailable, with a message to move it
// away). A host crash also ends every child holding a local lease, so no two
// holders can overlap through the lost writes, and fencing tokens keep
// rising because a token is never below the clock in microseconds. What can
// be lost is recent history, crash counts and quarantines (all of them when
// a corrupt file has to be moved away), as with a Redis without persistence
// that restarts.

// foreignLockTimeout bounds the wait for bbolt's lock on the database file.
// Only a program that opens the file without our lock file (a bbolt CLI, an
// older leasectl) can hold it, so waiting longer would only hide that.
const foreignLockTimeout = time.Second

// Buckets of the database file.
var (
	// bucketJobs maps a job ID to its jobDoc (JSON).
	bucketJobs = []byte("jobs")
	// bucketInFlight holds one empty value per run that has evidence, keyed
	// by its liveness expiry (8 bytes, big-endian microseconds) followed by
	// the job ID, so Scan walks only the expired runs and Leases only the
	// live ones.
	bucketInFlight = []byte("inflight")
	// bucketQuarantined holds one empty value per quarantined job.
	bucketQuarantined = []byte("quarantined")
	// bucketHistory holds the newest HistoryLimit events of each job (JSON),
	// keyed by the job ID, a zero byte (which job IDs cannot hold) and the
	// event's number (8 bytes, big-endian), so that recording an event
	// neither reads nor rewrites the others.
	bucketHistory = []byte("history")
)

// buckets are all the buckets of the database file.
var buckets = [][]byte{bucketJobs, bucketInFlight, bucketQuarantined, bucketHistory}

// storageError marks a failure of the file itself (as opposed to a refusal
// such as *HeldError): the transaction is rolled back and the caller gets an
// *UnavailableError.
type storageError struct{ err error }

func (e *storageError) Error() string { return e.err.Error() }
func (e *storageError) Unwrap() error { return e.err }

// corruptError means the file's content cannot be trusted; err says what
// was found.
type corruptError struct{ err error }

func (e *corruptError) Error() string { return e.err.Error() }
func (e *corruptError) Unwrap() error { return e.err }

// errNoChange rolls back a transaction that wrote nothing, saving the
// writes of an empty commit.
var errNoChange = errors.New("no change")

// txn is one transaction on the store, with the store's clock read once at
// its start.
type txn struct {
	tx     *bolt.Tx // nil for a read of a store whose file does not exist yet
	now    time.Time
	dirty  bool
	notify []string // jobs whose waiters to wake after the commit
}

// update runs fn in one read-write transaction under the store's lock. The
// transaction commits whatever fn wrote, also when fn returns a refusal; it
// is rolled back only on a storage error. Release notifications fn queued
// are published after the lock is released.
func (e *Embedded) update(ctx context.Context, op string, fn func(t *txn) error) error {
	var result error
	var notify []string
	err := e.withFile(ctx, op, true, func(db *bolt.DB) error {
		return db.Update(func(tx *bolt.Tx) error {
			t := &txn{tx: tx, now: e.clock()}
			for _, name := range buckets {
				if tx.Bucket(name) != nil {
					continue
				}
				if _, err := tx.CreateBucket(name); err != nil {
					return &storageError{fmt.Errorf("creating bucket %s: %w", name, err)}
				}
				t.dirty = true
			}
			result = fn(t)
			var se *storageError
			switch {
			case errors.As(result, &se):
				return se
			case !t.dirty:
				return errNoChange
			}
			notify = t.notify
			return nil
		})
	})
	if err != nil {
		return err
	}
	for _, job := range notify {
		e.publish(job)
	}
	return result
}

// view runs fn in one read-only transaction under the store's shared lock.
func (e *Embedded) view(ctx context.Context, op string, fn func(t *txn) error) error {
	var result error
	err := e.withFile(ctx, op, false, func(db *bolt.DB) error {
		if db == nil {
			result = fn(&txn{now: e.clock()})
			return nil
		}
		return db.View(func(tx *bolt.Tx) error {
			result = fn(&txn{tx: tx, now: e.clock()})
			var se *storageError
			if errors.As(result, &se) {
				return se
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	return result
}

// withFile takes the lock (exclusive for writes, shared for reads), opens
// the database, calls fn and closes it again. A read of a store whose file
// does not exist yet calls fn with a nil database. Failures come back as
// *UnavailableError.
func (e *Embedded) withFile(ctx context.Context, op string, write bool, fn func(db *bolt.DB) error) (err error) {
	unlock, err := e.lock(ctx, write)
	if err != nil {
		return &UnavailableError{Op: op, Err: err}
	}
	defer unlock()
	// A corrupt file can make bbolt panic or fault on its memory map: turn
	// both into an error for this call instead of a crash of the supervisor.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = e.unavailable(op, &corruptError{fmt.Errorf("%v", p)})
		}
	}()
	db, err := e.openDB(write)
	if err != nil {
		return e.unavailable(op, err)
	}
	if db != nil {
		defer func() {
			if cerr := db.Close(); cerr != nil && err == nil {
				err = e.unavailable(op, fmt.Errorf("closing: %w", cerr))
			}
		}()
	}
	if err := fn(db); err != nil && !errors.Is(err, errNoChange) {
		return e.unavailable(op, err)
	}
	return nil
}

// openDB opens the database file. For a read it returns nil, nil when the
// file does not exist or is still empty (a writer died before initialising
// it): the store is empty.
func (e *Embedded) openDB(write bool) (db *bolt.DB, err error) {
	if !write {
		fi, err := os.Stat(e.dbPath)
		if errors.Is(err, os.ErrNotExist) || (err == nil && fi.Size() == 0) {
			return nil, nil
		}
	}
	// bbolt panics on some corrupt files while opening them, before it
	// returns anything to close: keep its file to unlock and close it then.
	// Closing alone would not do: the memory map bbolt may already have made
	// (and which leaks here) keeps the file, and so its lock, alive.
	var file *os.File
	openFile := func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		file = f
		return f, err
	}
	defer func() {
		if p := recover(); p != nil {
			if file != nil {
				_ = unix.Flock(int(file.Fd()), unix.LOCK_UN)
				_ = file.Close()
			}
			db, err = nil, &corruptError{fmt.Errorf("%v", p)}
		}
	}()
	db, err = bolt.Open(e.dbPath, 0o600, &bolt.Options{
		Timeout: foreignLockTimeout, ReadOnly: !write, NoSync: true, OpenFile: openFile,
	})
	var pathErr *fs.PathError
	var errno syscall.Errno
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("another program holds the file lock on %s", e.dbPath)
	case errors.As(err, &pathErr), errors.As(err, &errno):
		return nil, fmt.Errorf("opening: %w", err)
	default:
		// Everything else bbolt reports while opening is about the
		// content: invalid meta pages, checksums, a version or a size it
		// cannot read.
		return nil, &corruptError{err}
	}
}

// unavailable wraps a storage failure in an *UnavailableError whose one-line
// message names the file and, where the operator can do something, what.
func (e *Embedded) unavailable(op string, err error) error {
	var msg error
	var corrupt *corruptError
	switch {
	case errors.As(err, &corrupt):
		msg = fmt.Errorf("embedded store file %s is corrupt (%w): move it away (mv %s %s.corrupt) and leasectl starts a fresh one; its fencing tokens keep rising",
			e.dbPath, err, e.dbPath, e.dbPath)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		msg = fmt.Errorf("disk full writing embedded store file %s: free some space (%w)", e.dbPath, err)
	case errors.Is(err, syscall.EROFS):
		msg = fmt.Errorf("embedded store file %s is on a read-only file system (%w)", e.dbPath, err)
	default:
		msg = fmt.Errorf("embedded store file %s: %w", e.dbPath, err)
	}
	return &UnavailableError{Op: op, Err: msg}
}

// lock takes the in-process lock, then the flock on the lock file, waiting
// no longer than ctx allows. The returned function releases both.
func (e *Embedded) lock(ctx context.Context, exclusive bool) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("before taking the store's lock: %w", err)
	}
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the store's lock: %w", ctx.Err())
	}
	f, err := e.flock(ctx, exclusive)
	if err != nil {
		<-e.sem
		return nil, err
	}
	return func() {
		// Closing the last descriptor of the lock file releases the flock.
		_ = f.Close()
		<-e.sem
	}, nil
}

// flock opens the lock file and locks it. The file is opened anew for every
// operation: a lock file that was deleted and re-created meanwhile is
// detected by its inode and locked again, so two processes never hold locks
// on two different files.
func (e *Embedded) flock(ctx context.Context, exclusive bool) (*os.File, error) {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	for {
		f, err := os.OpenFile(e.lockPath, os.O_RDWR|os.O_CREATE, 0o600)
		if errors.Is(err, os.ErrNotExist) {
			// The folder was removed: start afresh, like a deleted file.
			if err := os.MkdirAll(e.dir, 0o700); err != nil {
				return nil, fmt.Errorf("creating the embedded store folder: %w", err)
			}
			f, err = os.OpenFile(e.lockPath, os.O_RDWR|os.O_CREATE, 0o600)
		}
		if err != nil {
			return nil, fmt.Errorf("opening lock file: %w", err)
		}
		if err := flockWait(ctx, f, how); err != nil {
			return nil, fmt.Errorf("locking %s: %w", e.lockPath, err)
		}
		same, err := sameFile(f, e.lockPath)
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("checking lock file: %w", err)
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

// job reads a job's document; a job the store never saw has a zero one.
func (t *txn) job(id string) (*jobDoc, error) {
	doc := &jobDoc{}
	b := t.bucket(bucketJobs)
	if b == nil {
		return doc, nil
	}
	v := b.Get([]byte(id))
	if v == nil {
		return doc, nil
	}
	if err := json.Unmarshal(v, doc); err != nil {
		return nil, &storageError{&corruptError{fmt.Errorf("record of job %q: %w", id, err)}}
	}
	return doc, nil
}

// putJob writes a job's document.
func (t *txn) putJob(id string, doc *jobDoc) error {
	v, err := json.Marshal(doc)
	if err != nil {
		return &storageError{fmt.Errorf("encoding job %q: %w", id, err)}
	}
	return t.put(bucketJobs, []byte(id), v)
}

func (t *txn) bucket(name []byte) *bolt.Bucket {
	if t.tx == nil {
		return nil
	}
	return t.tx.Bucket(name)
}

func (t *txn) put(bucket, key, value []byte) error {
	t.dirty = true
	if err := t.tx.Bucket(bucket).Put(key, value); err != nil {
		return &storageError{fmt.Errorf("writing %s: %w", bucket, err)}
	}
	return nil
}

func (t *txn) delete(bucket, key []byte) error {
	t.dirty = true
	if err := t.tx.Bucket(bucket).Delete(key); err != nil {
		return &storageError{fmt.Errorf("deleting from %s: %w", bucket, err)}
	}
	return nil
}

// setRun makes r the job's run (liveness and evidence), replacing its
// previous one, and keeps the in-flight index in step. A nil r clears it.
func (t *txn) setRun(id string, doc *jobDoc, r *runDoc) error {
	if doc.Run != nil {
		if err := t.delete(bucketInFlight, inFlightKey(doc.Run.LiveUntil, id)); err != nil {
			return err
		}
	}
	doc.Run = r
	if r == nil {
		return nil
	}
	return t.put(bucketInFlight, inFlightKey(r.LiveUntil, id), []byte{})
}

// setQuarantined adds the job to, or removes it from, the quarantine index.
func (t *txn) setQuarantined(id string, on bool) error {
	if on {
		return t.put(bucketQuarantined, []byte(id), []byte{})
	}
	return t.delete(bucketQuarantined, []byte(id))
}

func inFlightKey(liveUntil time.Time, id string) []byte {
	k := make([]byte, 8+len(id))
	binary.BigEndian.PutUint64(k, uint64(liveUntil.UnixMicro()))
	copy(k[8:], id)
	return k
}

// inFlight returns the jobs of the in-flight index whose liveness expiry is
// at or before now (expired) or after it (live), in index order.
func (t *txn) inFlight(expired bool) []string {
	b := t.bucket(bucketInFlight)
	if b == nil {
		return nil
	}
	var jobs []string
	c := b.Cursor()
	boundary := inFlightKey(t.now.Add(time.Microsecond), "")
	if expired {
		for k, _ := c.First(); k != nil && string(k[:8]) < string(boundary); k, _ = c.Next() {
			jobs = append(jobs, string(k[8:]))
		}
		return jobs
	}
	for k, _ := c.Seek(boundary); k != nil; k, _ = c.Next() {
		jobs = append(jobs, string(k[8:]))
	}
	return jobs
}

// record appends e, stamped with the transaction's time, to the job's
// history and drops the event that falls out of the newest HistoryLimit.
func (t *txn) record(id string, doc *jobDoc, e Event) error {
	e.At = t.now
	v, err := json.Marshal(e)
	if err != nil {
		return &storageError{fmt.Errorf("encoding an event of job %q: %w", id, err)}
	}
	if err := t.put(bucketHistory, historyKey(id, doc.Events), v); err != nil {
		return err
	}
	doc.Events++
	if dropped := doc.Events - 1 - HistoryLimit; dropped >= 0 {
		return t.delete(bucketHistory, historyKey(id, dropped))
	}
	return nil
}

// history returns the job's kept events, oldest first.
func (t *txn) history(id string) ([]Event, error) {
	b := t.bucket(bucketHistory)
	if b == nil {
		return nil, nil
	}
	var events []Event
	prefix := historyKey(id, 0)[:len(id)+1]
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var e Event
		if err := json.Unmarshal(v, &e); err != nil {
			return nil, &storageError{&corruptError{fmt.Errorf("history of job %q: %w", id, err)}}
		}
		events = append(events, e)
	}
	return events, nil
}

func historyKey(id string, n int64) []byte {
	k := make([]byte, len(id)+1+8)
	copy(k, id)
	binary.BigEndian.PutUint64(k[len(id)+1:], uint64(n))
	return k
}
