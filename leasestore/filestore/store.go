package filestore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// Store is the store in a local folder, for leasectl processes on one host.
// Each job is a file of its own (see file.go); every operation that changes
// a job locks that job alone, and reads lock nothing, so any number of
// processes can share the store and none of them waits on another job.
// Waiters are woken through file-system notifications (inotify, kqueue).
type Store struct {
	dir       string
	dataDir   string
	notifyDir string
	access    access // how it creates folders and files (perm.go)

	// The token feed (tokenfeed.go), started by the portable Store's first
	// WatchTokens.
	feedMu sync.Mutex
	feed   *tokenSource
}

var _ leasestore.Driver = (*Store)(nil)

// Open opens the embedded store for namespace in dir, creating the
// folder (0700) if needed. The files are created by the first operation
// that writes: the folder <namespace>.store and, for waiters, the folder
// <namespace>.notify; 0600 in 0700 folders, or, when dir is group-writable,
// shared with its group (0660 in 02770 folders, see perm.go). Opening is
// cheap: it does no file I/O beyond creating the folder and reading its
// mode.
func Open(dir, namespace string) (*Store, error) {
	if err := leasestore.ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, &leasestore.UnavailableError{Op: "open", Err: fmt.Errorf("creating the embedded store folder: %w (choose one this user may create with --store file:///PATH or XDG_STATE_HOME)", err)}
	}
	acc, err := accessOf(dir)
	if err != nil {
		return nil, &leasestore.UnavailableError{Op: "open", Err: fmt.Errorf("the embedded store folder: %w", err)}
	}
	base := filepath.Join(dir, fileName(namespace))
	return &Store{dir: dir, dataDir: base + ".store", notifyDir: base + ".notify", access: acc}, nil
}

// fileName encodes a namespace as a file name: bytes other than a-z 0-9 . _ -
// become %XX. '/' must not make a path, and upper-case letters are escaped
// too so that namespaces differing only in case stay apart on the
// case-insensitive file systems of macOS.
func fileName(namespace string) string {
	var b strings.Builder
	for i := 0; i < len(namespace); i++ {
		c := namespace[i]
		if 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// clock is the store's clock, at the microsecond resolution of the tokens.
func (e *Store) clock() time.Time {
	return time.Now().UTC().Truncate(time.Microsecond)
}

// Close stops the token feed, if one was started. Files are open only
// during an operation; subscriptions are closed on their own.
func (e *Store) Close() error {
	e.closeFeed()
	return nil
}

// jobDoc is everything the store keeps about one job, stored as JSON in a
// file of its own: its record, as the rules read and write it, and its
// history.
type jobDoc struct {
	rules.Record
	// Run is the job's one run as a leasectl older than slots keeps it:
	// read into Record.Runs, and written in place of Runs while the job
	// has one run, in its first slot, so that an older leasectl sharing
	// the store during an upgrade still sees it held.
	Run *rules.Run `json:"run,omitempty"`
	// events are the newest HistoryLimit history events, oldest first, each
	// as its JSON: they are stored as lines after the record's own JSON, and
	// decoded only when read (Status, RecordLate), since every write of the
	// record carries them.
	events [][]byte
}

// apply does what step asks besides the record's own change: its events
// are appended to the history, of which the newest HistoryLimit are kept,
// and waiters and the token feed are told after the write.
func (t *txn) apply(doc *jobDoc, step rules.Step) {
	for _, e := range step.Events {
		v, _ := json.Marshal(e) // an Event always encodes
		doc.events = append(doc.events, v)
	}
	if n := len(doc.events) - leasestore.HistoryLimit; n > 0 {
		doc.events = slices.Delete(doc.events, 0, n)
	}
	if step.Wake {
		t.notify = append(t.notify, doc.Job)
	}
	if step.Tokens {
		t.tokens = append(t.tokens, doc.Job)
	}
}

// history decodes the job's history.
func (d *jobDoc) history() ([]leasestore.Event, error) {
	events := make([]leasestore.Event, len(d.events))
	for i, v := range d.events {
		if err := json.Unmarshal(v, &events[i]); err != nil {
			return nil, &corruptError{fmt.Errorf("history of job %q: %w", d.Job, err)}
		}
	}
	return events, nil
}

// encode is the record as a slot holds it: its JSON on the first line and
// an event's on each of the others.
func (d *jobDoc) encode() ([]byte, error) {
	w := *d
	if len(w.Runs) == 1 && w.Runs[0].Slot == 0 {
		w.Run, w.Runs = w.Runs[0], nil
	}
	v, err := json.Marshal(&w)
	if err != nil {
		return nil, err
	}
	for _, e := range d.events {
		v = append(v, '\n')
		v = append(v, e...)
	}
	return v, nil
}

// decode reads a slot's content into d.
func (d *jobDoc) decode(body []byte) error {
	line, rest, _ := bytes.Cut(body, []byte{'\n'})
	if err := json.Unmarshal(line, d); err != nil {
		return err
	}
	if d.Run != nil {
		d.Runs, d.Run = append(d.Runs, d.Run), nil
	}
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte{'\n'})
		d.events = append(d.events, line)
	}
	return nil
}

// Acquire grants the lease on req.Job; see Store.
func (e *Store) Acquire(ctx context.Context, req leasestore.AcquireRequest) (*leasestore.Lease, error) {
	if req.Wait {
		if refusal := e.waitingRefusal(req); refusal != nil {
			return nil, refusal
		}
	}
	var lease *leasestore.Lease
	err := e.update(ctx, "acquire", req.Job, func(t *txn, doc *jobDoc) (err error) {
		var step rules.Step
		e.endGone(&doc.Record, req.Holder, t.now, dyingGroupWait)
		step, lease, err = rules.Acquire(&doc.Record, req, t.now)
		t.apply(doc, step)
		return err
	})
	if err != nil {
		return nil, err
	}
	return lease, nil
}

// waitingRefusal is the answer to req, a waiter asking again, when the rules
// refuse it as held on a lock-free read of the job's record and change
// nothing; nil when the job's lock must decide. A release wakes every
// waiter, and the one whose turn it is would otherwise wait in the lock's
// queue behind all the others, each refused anyway. A refusal that changes
// nothing is as true at the read as under the lock, and a release after
// the read wakes the waiter again (it subscribed before it first asked).
func (e *Store) waitingRefusal(req leasestore.AcquireRequest) error {
	var refusal error
	_ = e.view("acquire", func(t *txn) error {
		doc, err := t.job(req.Job)
		if err != nil {
			return err
		}
		before, err := doc.encode()
		if err != nil {
			return err
		}
		e.endGone(&doc.Record, req.Holder, t.now, 0)
		_, _, err = rules.Acquire(&doc.Record, req, t.now)
		after, aerr := doc.encode()
		if errors.As(err, new(*leasestore.HeldError)) && aerr == nil && bytes.Equal(before, after) {
			refusal = err
		}
		return nil
	})
	return refusal
}

// Renew extends l's liveness and its run's evidence; see Store.
func (e *Store) Renew(ctx context.Context, l *leasestore.Lease) error {
	return e.update(ctx, "renew", l.Job, func(t *txn, doc *jobDoc) error {
		step, err := rules.Renew(&doc.Record, l, t.now)
		t.apply(doc, step)
		return err
	})
}

// Release ends l with outcome out; see Store.
func (e *Store) Release(ctx context.Context, l *leasestore.Lease, out leasestore.Outcome) error {
	return e.update(ctx, "release", l.Job, func(t *txn, doc *jobDoc) error {
		step, err := rules.Release(&doc.Record, l, out, t.now)
		t.apply(doc, step)
		return err
	})
}

// RecordLate records the outcome of a run that did not reach the store in
// time, and undoes what its absence did; see Store.
func (e *Store) RecordLate(ctx context.Context, late leasestore.LateOutcome) (leasestore.Correction, error) {
	var c leasestore.Correction
	err := e.update(ctx, "record late outcome", late.Job, func(t *txn, doc *jobDoc) error {
		history, err := doc.history()
		if err != nil {
			return err
		}
		var step rules.Step
		step, c = rules.RecordLate(&doc.Record, history, late, t.now)
		t.apply(doc, step)
		return nil
	})
	return c, err
}

// scanWorkers is how many jobs Scan deals with at once. Each job's step is
// mostly waiting on system calls, so a few at a time use both cores of a
// small machine; more would only queue.
const scanWorkers = 4

// Scan counts every run whose evidence is there without liveness as a
// crash; see Store. It reads only the in-flight index entries whose
// liveness expired, and deals with each job in a step of its own: a job
// that another operation holds at that moment is left to the next pass (or
// to that operation, if it is an Acquire), so a process stopped inside an
// operation on one job does not hold up the others.
func (e *Store) Scan(ctx context.Context) ([]leasestore.Crash, error) {
	entries, err := e.inFlight(e.clock(), true)
	if err != nil {
		return nil, e.unavailable("scan", err)
	}
	byKey := map[string][]string{}
	for _, en := range entries {
		byKey[en.key] = append(byKey[en.key], en.path)
	}
	var (
		mu      sync.Mutex
		crashes []leasestore.Crash
		failed  error
		wg      sync.WaitGroup
	)
	todo := make(chan string)
	for range min(scanWorkers, len(byKey)) {
		wg.Go(func() {
			for key := range todo {
				c, err := e.scanJob(ctx, key, byKey[key])
				mu.Lock()
				crashes = append(crashes, c...)
				if err != nil && failed == nil {
					failed = err
				}
				mu.Unlock()
			}
		})
	}
	for _, key := range keys(entries) {
		mu.Lock()
		stop := failed != nil
		mu.Unlock()
		if stop {
			break
		}
		if err := ctx.Err(); err != nil {
			mu.Lock()
			failed = &leasestore.UnavailableError{Op: "scan", Err: err}
			mu.Unlock()
			break
		}
		todo <- key
	}
	close(todo)
	wg.Wait()
	if failed != nil {
		return crashes, failed
	}
	e.removePassedWindows()
	return crashes, nil
}

// scanJob is Scan's step for the job whose files are named key and whose
// expired in-flight entries are at paths: it counts the crash of each of
// its runs that has evidence without liveness, and removes the entries its
// record does not need.
func (e *Store) scanJob(ctx context.Context, key string, paths []string) ([]leasestore.Crash, error) {
	var crashes []leasestore.Crash
	err := e.updateKey(ctx, "scan", key, "", false, func(t *txn, doc *jobDoc) error {
		// Entries a killed process left that the record does not need.
		for _, path := range paths {
			if !slices.ContainsFunc(doc.Runs, func(u *rules.Run) bool { return path == e.inFlightPath(key, u.LiveUntil) }) {
				t.stray = append(t.stray, path)
			}
		}
		var step rules.Step
		step, crashes = rules.Reap(&doc.Record, t.now)
		t.apply(doc, step)
		return nil
	})
	return crashes, err
}

// Quarantine puts job in quarantine by an operator's decision; see Store.
func (e *Store) Quarantine(ctx context.Context, job string, note leasestore.Note) error {
	return e.update(ctx, "quarantine", job, func(t *txn, doc *jobDoc) error {
		t.apply(doc, rules.Quarantine(&doc.Record, note, t.now))
		return nil
	})
}

// ReleaseQuarantine lets job run again and resets its crash count; see
// Store.
func (e *Store) ReleaseQuarantine(ctx context.Context, job string, note leasestore.Note) error {
	return e.update(ctx, "release quarantine", job, func(t *txn, doc *jobDoc) error {
		step, err := rules.ReleaseQuarantine(&doc.Record, note, t.now)
		t.apply(doc, step)
		return err
	})
}

// Stop asks job's running child to stop; see Store.
func (e *Store) Stop(ctx context.Context, job string, note leasestore.Note) error {
	return e.update(ctx, "stop", job, func(t *txn, doc *jobDoc) error {
		step, err := rules.Stop(&doc.Record, note, t.now)
		t.apply(doc, step)
		return err
	})
}

// quarantined reads the records the quarantine index names, and returns
// the quarantined ones.
func (t *txn) quarantined() ([]*jobDoc, error) {
	names, err := readNames(filepath.Join(t.e.dataDir, quarantinedDir))
	if err != nil {
		return nil, err
	}
	var docs []*jobDoc
	for _, key := range names {
		doc, err := t.readKey(key, "")
		if err != nil {
			return nil, err
		}
		if doc.Quarantine != nil {
			docs = append(docs, doc)
		}
	}
	return docs, nil
}

// Quarantined lists the quarantined jobs, ordered by job.
func (e *Store) Quarantined(ctx context.Context) ([]leasestore.Quarantine, error) {
	var list []leasestore.Quarantine
	err := e.view("list quarantined", func(t *txn) error {
		docs, err := t.quarantined()
		for _, doc := range docs {
			list = append(list, *doc.Quarantine)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(list, func(a, b leasestore.Quarantine) int { return strings.Compare(a.Job, b.Job) })
	return list, nil
}

// Status reports job's state, holder, counters and history; see Store.
func (e *Store) Status(ctx context.Context, job string) (*leasestore.JobStatus, error) {
	var st *leasestore.JobStatus
	err := e.view("status", func(t *txn) error {
		doc, err := t.job(job)
		if err != nil {
			return err
		}
		history, err := doc.history()
		if err != nil {
			return &fileError{e.recordPath(jobKey(job)), err}
		}
		e.endGone(&doc.Record, "", t.now, 0)
		st = rules.Status(&doc.Record, history, t.now)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// Jobs lists the known jobs whose IDs start with prefix, ordered, at most
// limit of them; see Store. Record files are named by a hash of their job,
// so it reads every record.
func (e *Store) Jobs(ctx context.Context, prefix string, limit int) ([]string, error) {
	var jobs []string
	err := e.view("list jobs", func(t *txn) error {
		names, err := readNames(filepath.Join(e.dataDir, jobsDir))
		if err != nil {
			return err
		}
		for _, key := range names {
			doc, err := t.readKey(key, "")
			if err != nil {
				return err
			}
			if doc.Known() {
				jobs = append(jobs, doc.Job)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return leasestore.SelectJobs(jobs, prefix, limit), nil
}

// Leases lists the live leases, ordered by job and slot. It reads the in-flight
// index entries that are live, then each one's record; each lease is read
// at the store's clock just after its record.
func (e *Store) Leases(ctx context.Context) ([]leasestore.Holder, error) {
	var leases []leasestore.Holder
	err := e.view("list leases", func(t *txn) error {
		entries, err := e.inFlight(t.now, false)
		if err != nil {
			return err
		}
		for _, key := range keys(entries) {
			doc, err := t.readKey(key, "")
			if err != nil {
				return err
			}
			for _, u := range doc.LiveRuns(t.now) {
				h := doc.Holder(u)
				h.ReadAt = t.now
				leases = append(leases, h)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(leases, func(a, b leasestore.Holder) int {
		return cmp.Or(strings.Compare(a.Job, b.Job), a.Slot-b.Slot)
	})
	return leases, nil
}

// Counts returns the number of live leases and of quarantined jobs. The
// leases are counted from the in-flight index alone, without reading a
// record: a run released by a process killed before it removed the run's
// entry is counted until its liveness would have expired.
func (e *Store) Counts(ctx context.Context) (leasestore.Counts, error) {
	var c leasestore.Counts
	err := e.view("count", func(t *txn) error {
		entries, err := e.inFlight(t.now, false)
		if err != nil {
			return err
		}
		c.InFlight = len(keys(entries))
		docs, err := t.quarantined()
		c.Quarantined = len(docs)
		return err
	})
	return c, err
}

// CheckToken returns nil when token is job's current fencing token and its
// lease is live; see Store.
func (e *Store) CheckToken(ctx context.Context, job string, token int64) error {
	return e.view("check token", func(t *txn) error {
		doc, err := t.job(job)
		if err != nil {
			return err
		}
		return rules.CheckToken(&doc.Record, token, t.now)
	})
}

// Limits are leasestore.MaxSlots slots and every positive TTL: the store
// keeps every run of a job in its one record; see leasestore.Driver.
func (e *Store) Limits() leasestore.Limits { return leasestore.Limits{MaxSlots: leasestore.MaxSlots} }

// Leave takes holder out of job's queue of waiters; see leasestore.Leaser.
func (e *Store) Leave(ctx context.Context, job, holder string) error {
	return e.update(ctx, "leave the queue", job, func(t *txn, doc *jobDoc) error {
		t.apply(doc, rules.Leave(&doc.Record, holder, t.now))
		return nil
	})
}
