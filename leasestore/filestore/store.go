package filestore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasectl/leasectl/leasestore"
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

	// The token feed (tokenfeed.go), started by the first WatchTokens.
	feedMu     sync.Mutex
	feed       *tokenFeed
	feedClosed bool
}

var (
	_ leasestore.Store        = (*Store)(nil)
	_ leasestore.LateRecorder = (*Store)(nil)
)

// Open opens the embedded store for namespace in dir, creating the
// folder (0700) if needed. The files are created (0600, in 0700 folders) by
// the first operation that writes: the folder <namespace>.store and, for
// waiters, the folder <namespace>.notify. Opening is cheap: it does no file
// I/O beyond creating the folder.
func Open(dir, namespace string) (*Store, error) {
	if err := leasestore.ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, &leasestore.UnavailableError{Op: "open", Err: fmt.Errorf("creating the embedded store folder: %w", err)}
	}
	base := filepath.Join(dir, fileName(namespace))
	return &Store{dir: dir, dataDir: base + ".store", notifyDir: base + ".notify"}, nil
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

// expiry is now+ttl at the microsecond resolution of the in-flight index,
// so that the index and the documents agree on what is live.
func expiry(now time.Time, ttl time.Duration) time.Time {
	return now.Add(ttl).Truncate(time.Microsecond)
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

// jobDoc is everything the store keeps about one job, its record, stored
// as JSON in a file of its own.
type jobDoc struct {
	Job         string                  `json:"job"`
	LastToken   int64                   `json:"last_token,omitempty"`
	Attempts    int64                   `json:"attempts,omitempty"`
	Crashes     int                     `json:"crashes,omitempty"`
	MaxCrashes  int                     `json:"max_crashes,omitempty"` // threshold of the last run
	LastHolder  string                  `json:"last_holder,omitempty"`
	LastHost    string                  `json:"last_host,omitempty"`
	Region      string                  `json:"region,omitempty"` // recorded by the first grant that named one
	LastSuccess time.Time               `json:"last_success,omitzero"`
	Quarantine  *leasestore.Quarantine  `json:"quarantine,omitempty"`
	LastOutcome *leasestore.LastOutcome `json:"last_outcome,omitempty"`
	Run         *runDoc                 `json:"run,omitempty"`
	// Abandoned is the last holder that gave up on its grant (RecordLate
	// with Token 0): its Acquire is refused.
	Abandoned string `json:"abandoned,omitempty"`
	// events are the newest HistoryLimit history events, oldest first, each
	// as its JSON: they are stored as lines after the record's own JSON, and
	// decoded only when read (Status), since every write of the record
	// carries them.
	events [][]byte
}

// runDoc is the current run's liveness (until LiveUntil) and evidence (until
// EvidenceUntil).
type runDoc struct {
	Holder        string        `json:"holder"`
	Token         int64         `json:"token"`
	Host          string        `json:"host"`
	PID           int           `json:"pid"`
	Command       []string      `json:"command"`
	Started       time.Time     `json:"started"`
	Attempt       int64         `json:"attempt"`
	TTL           time.Duration `json:"ttl"`
	EvidenceTTL   time.Duration `json:"evidence_ttl"`
	MaxCrashes    int           `json:"max_crashes"`
	LiveUntil     time.Time     `json:"live_until"`
	EvidenceUntil time.Time     `json:"evidence_until"`
	RTT           time.Duration `json:"rtt,omitempty"` // the holder's last renewal round trip, as it reported it
}

// live reports whether the job's liveness has not expired at now.
func (d *jobDoc) live(now time.Time) bool {
	return d.Run != nil && now.Before(d.Run.LiveUntil)
}

// evidence reports whether the job's crash evidence has not expired at now.
func (d *jobDoc) evidence(now time.Time) bool {
	return d.Run != nil && now.Before(d.Run.EvidenceUntil)
}

// crashed reports whether the job has evidence without liveness: a run
// whose supervisor vanished.
func (d *jobDoc) crashed(now time.Time) bool {
	return d.evidence(now) && !d.live(now)
}

// quarantinedError is Acquire's refusal of the quarantined job.
func (d *jobDoc) quarantinedError() error {
	return &leasestore.QuarantinedError{Quarantine: *d.Quarantine}
}

// crash describes the job's run as a crash detected at now, counted as the
// next consecutive one.
func (d *jobDoc) crash(id string, now time.Time) *leasestore.Crash {
	r := d.Run
	return &leasestore.Crash{
		Job: id, Holder: r.Holder, Host: r.Host, PID: r.PID, Token: r.Token,
		Command: r.Command, StartedAt: r.Started, StaleSince: r.LiveUntil, DetectedAt: now,
		Crashes: d.Crashes + 1,
	}
}

// holder describes the run as a live lease.
func (r *runDoc) holder(id string) *leasestore.Holder {
	return &leasestore.Holder{
		Job: id, Worker: r.Holder, Host: r.Host, PID: r.PID, Token: r.Token, Attempt: r.Attempt,
		Command: r.Command, StartedAt: r.Started, ExpiresAt: r.LiveUntil, LastRTT: r.RTT,
	}
}

// record appends e, stamped with now, to the job's history and drops what
// falls out of the newest HistoryLimit events.
func (d *jobDoc) record(now time.Time, e leasestore.Event) {
	e.At = now
	v, _ := json.Marshal(e) // an Event always encodes
	d.events = append(d.events, v)
	if n := len(d.events) - leasestore.HistoryLimit; n > 0 {
		d.events = slices.Delete(d.events, 0, n)
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
	v, err := json.Marshal(d)
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
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte{'\n'})
		d.events = append(d.events, line)
	}
	return nil
}

// consumeCrash counts the job's current run as a crash, exactly once: it
// deletes the evidence in the same step, quarantines the job at the run's
// own threshold and wakes waiters.
func (t *txn) consumeCrash(doc *jobDoc, detail string) *leasestore.Crash {
	c := doc.crash(doc.Job, t.now)
	r := doc.Run
	doc.Crashes = c.Crashes
	doc.record(t.now, leasestore.Event{Kind: leasestore.EventCrashed, Worker: r.Holder, Token: r.Token, Detail: detail})
	doc.Run = nil
	if doc.Crashes >= r.MaxCrashes && doc.Quarantine == nil {
		reason := fmt.Sprintf("%d consecutive crashes", doc.Crashes)
		doc.Quarantine = &leasestore.Quarantine{
			Job: doc.Job, Crashes: doc.Crashes, Since: t.now, Reason: reason, By: quarantinedByLeasectl,
			LastHolder: r.Holder, LastHost: r.Host,
		}
		doc.record(t.now, leasestore.Event{Kind: leasestore.EventQuarantined, Worker: r.Holder, Token: r.Token,
			Detail: "by " + quarantinedByLeasectl + ": " + reason})
		c.Quarantined = true
	}
	t.notify = append(t.notify, doc.Job)
	t.tokens = append(t.tokens, doc.Job)
	return c
}

// quarantinedByLeasectl is Quarantine.By for a job quarantined for crashing.
const quarantinedByLeasectl = leasestore.ByLeasectl

// staleDetail is the history detail of a crash found by Acquire or Scan,
// word for word the Redis store's (docs/semantics.md, History events).
func staleDetail(by string) string {
	return "supervisor vanished: liveness expired, found by " + by
}

// Acquire grants the lease on req.Job; see Store.
func (e *Store) Acquire(ctx context.Context, req leasestore.AcquireRequest) (*leasestore.Lease, error) {
	var lease *leasestore.Lease
	err := e.update(ctx, "acquire", req.Job, func(t *txn, doc *jobDoc) (err error) {
		lease, err = t.acquire(req, doc)
		return err
	})
	if err != nil {
		return nil, err
	}
	return lease, nil
}

// acquire is Acquire on the job's record.
func (t *txn) acquire(req leasestore.AcquireRequest, doc *jobDoc) (*leasestore.Lease, error) {
	if doc.Abandoned != "" && doc.Abandoned == req.Holder {
		return nil, fmt.Errorf("acquire job %q: worker %s gave up on it: %w", req.Job, req.Holder, leasestore.ErrLeaseLost)
	}
	if doc.live(t.now) && doc.Run.Holder == req.Holder {
		// Asked again by its holder, whose first answer was lost: the same
		// lease, renewed, as the first answer would have given it.
		r := doc.Run
		t.extend(doc, req.TTL)
		return &leasestore.Lease{Job: req.Job, Holder: r.Holder, Token: r.Token, Attempt: r.Attempt,
			TTL: req.TTL, GrantedAt: t.now}, nil
	}
	if doc.Quarantine != nil {
		return nil, doc.quarantinedError()
	}
	if req.Region != "" && doc.Region != "" && req.Region != doc.Region {
		return nil, &leasestore.RegionError{Job: req.Job, Region: doc.Region, Requested: req.Region}
	}
	if doc.live(t.now) {
		r := doc.Run
		return nil, &leasestore.HeldError{Job: req.Job, Holder: r.Holder, Host: r.Host, PID: r.PID, Token: r.Token,
			Since: r.Started, ExpiresIn: r.LiveUntil.Sub(t.now)}
	}
	var recovered *leasestore.Crash
	if doc.crashed(t.now) {
		recovered = t.consumeCrash(doc, staleDetail("acquire"))
		if recovered.Quarantined {
			return nil, doc.quarantinedError()
		}
	}
	if !req.Deadline.IsZero() && t.now.After(req.Deadline) {
		return nil, &leasestore.DeadlineError{Job: req.Job, Deadline: req.Deadline, Now: t.now}
	}
	if req.MinInterval > 0 && !doc.LastSuccess.IsZero() {
		if age := t.now.Sub(doc.LastSuccess); age < req.MinInterval {
			return nil, &leasestore.TooSoonError{Job: req.Job, LastSuccess: doc.LastSuccess, MinInterval: req.MinInterval, Age: age}
		}
	}
	token := max(doc.LastToken+1, t.now.UnixMicro())
	doc.Attempts++
	// This also drops a previous run whose evidence expired unseen.
	doc.Run = &runDoc{
		Holder: req.Holder, Token: token, Host: req.Host, PID: req.PID, Command: req.Command,
		Started: t.now, Attempt: doc.Attempts, TTL: req.TTL, EvidenceTTL: req.EvidenceTTL,
		MaxCrashes: req.MaxCrashes, LiveUntil: expiry(t.now, req.TTL), EvidenceUntil: expiry(t.now, req.EvidenceTTL),
	}
	doc.LastToken = token
	doc.MaxCrashes = req.MaxCrashes
	doc.LastHolder = req.Holder
	doc.LastHost = req.Host
	if doc.Region == "" {
		doc.Region = req.Region
	}
	doc.record(t.now, leasestore.Event{Kind: leasestore.EventAcquired, Worker: req.Holder, Token: token,
		Detail: fmt.Sprintf("attempt %d", doc.Attempts)})
	t.tokens = append(t.tokens, req.Job)
	return &leasestore.Lease{Job: req.Job, Holder: req.Holder, Token: token, Attempt: doc.Attempts,
		TTL: req.TTL, GrantedAt: t.now, Recovered: recovered}, nil
}

// extend moves the liveness of the job's run to now+ttl and its evidence to
// now+its own TTL.
func (t *txn) extend(doc *jobDoc, ttl time.Duration) {
	renewed := *doc.Run
	renewed.LiveUntil = expiry(t.now, ttl)
	renewed.EvidenceUntil = expiry(t.now, renewed.EvidenceTTL)
	doc.Run = &renewed
}

// Renew extends l's liveness and its run's evidence; see Store.
func (e *Store) Renew(ctx context.Context, l *leasestore.Lease) error {
	return e.update(ctx, "renew", l.Job, func(t *txn, doc *jobDoc) error {
		r := doc.Run
		if doc.live(t.now) && r.Holder == l.Holder && r.Token == l.Token {
			t.extend(doc, l.TTL)
			if l.RTT > 0 {
				doc.Run.RTT = l.RTT
			}
			return nil
		}
		if doc.evidence(t.now) && r.Token == l.Token {
			doc.record(t.now, leasestore.Event{Kind: leasestore.EventLeaseLost, Worker: l.Holder, Token: l.Token,
				Detail: "renewal came after the lease expired"})
		}
		return fmt.Errorf("renew job %q token %d: %w", l.Job, l.Token, leasestore.ErrLeaseLost)
	})
}

// Release ends l with outcome out; see Store.
func (e *Store) Release(ctx context.Context, l *leasestore.Lease, out leasestore.Outcome) error {
	return e.update(ctx, "release", l.Job, func(t *txn, doc *jobDoc) error {
		if !doc.evidence(t.now) || doc.Run.Token != l.Token {
			return fmt.Errorf("release job %q token %d: %w", l.Job, l.Token, leasestore.ErrLeaseLost)
		}
		t.release(doc, out)
		return nil
	})
}

// release ends the job's run, whose evidence is there, with outcome out.
func (t *txn) release(doc *jobDoc, out leasestore.Outcome) {
	r := doc.Run
	doc.LastOutcome = &leasestore.LastOutcome{Outcome: out, Worker: r.Holder, Token: r.Token, FinishedAt: t.now}
	if out.Result == leasestore.ResultCrashed {
		t.consumeCrash(doc, out.Detail())
		return
	}
	if out.Result == leasestore.ResultCompleted {
		doc.Crashes = 0
		doc.LastSuccess = t.now
	}
	doc.record(t.now, leasestore.Event{Kind: leasestore.EventReleased, Worker: r.Holder, Token: r.Token, Detail: out.Detail()})
	doc.Run = nil
	t.notify = append(t.notify, doc.Job)
	t.tokens = append(t.tokens, doc.Job)
}

// RecordLate records the outcome of a run that did not reach the store in
// time, and undoes what its absence did; see Store.
func (e *Store) RecordLate(ctx context.Context, late leasestore.LateOutcome) (leasestore.Correction, error) {
	var c leasestore.Correction
	err := e.update(ctx, "record late outcome", late.Job, func(t *txn, doc *jobDoc) (err error) {
		c, err = t.recordLate(doc, late)
		return err
	})
	return c, err
}

// recordLate is RecordLate on the job's record.
func (t *txn) recordLate(doc *jobDoc, late leasestore.LateOutcome) (leasestore.Correction, error) {
	if late.Token == 0 {
		doc.Abandoned = late.Holder
	}
	if r := doc.Run; doc.evidence(t.now) && r.Holder == late.Holder && (late.Token == 0 || r.Token == late.Token) {
		t.release(doc, late.Outcome)
		return leasestore.Correction{Released: true, Crashes: doc.Crashes}, nil
	}
	history, err := doc.history()
	if err != nil {
		return leasestore.Correction{}, err
	}
	fix := leasestore.CorrectLate(history, late.Holder, late.Token, late.Outcome, doc.Crashes)
	if fix.Recorded || fix.Token == 0 || fix.Token > doc.LastToken {
		return leasestore.Correction{Crashes: doc.Crashes}, nil
	}
	c := leasestore.Correction{CrashWithdrawn: fix.Withdrawn, Crashes: fix.Crashes}
	doc.Crashes = fix.Crashes
	if fix.Success.After(doc.LastSuccess) {
		doc.LastSuccess = fix.Success
	}
	if q := doc.Quarantine; q != nil && fix.LiftsQuarantine(q.By, q.Since, doc.MaxCrashes) {
		doc.Quarantine = nil
		doc.record(t.now, fix.LiftEvent())
		t.notify = append(t.notify, doc.Job)
		c.QuarantineLifted = true
	}
	doc.LastOutcome = fix.LastOutcome(late, doc.LastOutcome, t.now)
	doc.record(t.now, fix.LateEvent(late, c.QuarantineLifted))
	return c, nil
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
				if c != nil {
					crashes = append(crashes, *c)
				}
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
// expired in-flight entries are at paths: it counts the job's crash, if its
// run has evidence without liveness, and removes the entries its record
// does not need.
func (e *Store) scanJob(ctx context.Context, key string, paths []string) (*leasestore.Crash, error) {
	var crash *leasestore.Crash
	err := e.updateKey(ctx, "scan", key, "", false, func(t *txn, doc *jobDoc) error {
		// Entries a killed process left that the record does not need.
		for _, path := range paths {
			if doc.Run == nil || path != e.inFlightPath(key, doc.Run.LiveUntil) {
				t.stray = append(t.stray, path)
			}
		}
		if doc.Run != nil && !doc.live(t.now) {
			if doc.crashed(t.now) {
				crash = t.consumeCrash(doc, staleDetail("scan"))
			} else {
				// The evidence expired unseen: like an expired Redis key,
				// the run is gone without being counted.
				doc.Run = nil
			}
		}
		return nil
	})
	return crash, err
}

// Quarantine puts job in quarantine by an operator's decision; see Store.
func (e *Store) Quarantine(ctx context.Context, job string, note leasestore.Note) error {
	return e.update(ctx, "quarantine", job, func(t *txn, doc *jobDoc) error {
		if doc.Quarantine == nil {
			doc.Quarantine = &leasestore.Quarantine{Job: job, Since: t.now, LastHolder: doc.LastHolder, LastHost: doc.LastHost}
		}
		doc.Quarantine.By = note.By
		doc.Quarantine.Reason = note.Reason
		doc.Quarantine.Crashes = doc.Crashes
		doc.record(t.now, leasestore.Event{Kind: leasestore.EventQuarantined, Worker: note.By, Detail: noteDetail(note)})
		return nil
	})
}

// ReleaseQuarantine lets job run again and resets its crash count; see
// Store.
func (e *Store) ReleaseQuarantine(ctx context.Context, job string, note leasestore.Note) error {
	return e.update(ctx, "release quarantine", job, func(t *txn, doc *jobDoc) error {
		if doc.Quarantine == nil {
			return fmt.Errorf("job %q: %w", job, leasestore.ErrNotQuarantined)
		}
		doc.Quarantine = nil
		doc.Crashes = 0
		doc.record(t.now, leasestore.Event{Kind: leasestore.EventUnquarantine, Worker: note.By, Detail: noteDetail(note)})
		t.notify = append(t.notify, job)
		return nil
	})
}

func noteDetail(note leasestore.Note) string {
	return fmt.Sprintf("by %s: %s", note.By, note.Reason)
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
		st = &leasestore.JobStatus{
			Job: job, State: leasestore.StateIdle, Now: t.now, Region: doc.Region, LastToken: doc.LastToken, Attempts: doc.Attempts,
			Crashes: doc.Crashes, MaxCrashes: doc.MaxCrashes, Quarantine: doc.Quarantine,
			LastOutcome: doc.LastOutcome, LastSuccess: doc.LastSuccess, History: history,
		}
		if doc.live(t.now) {
			st.Holder = doc.Run.holder(job)
		}
		switch {
		case doc.Quarantine != nil:
			st.State = leasestore.StateQuarantined
		case st.Holder != nil:
			st.State = leasestore.StateRunning
		case doc.crashed(t.now):
			st.State = leasestore.StateCrashed
			st.Crashed = doc.crash(job, t.now)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// Leases lists the live leases, ordered by job. It reads the in-flight
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
			if doc.live(t.now) {
				h := doc.Run.holder(doc.Job)
				h.ReadAt = t.now
				leases = append(leases, *h)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(leases, func(a, b leasestore.Holder) int { return strings.Compare(a.Job, b.Job) })
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
		live := doc.live(t.now) && doc.Run.Token == doc.LastToken
		if token == doc.LastToken && live {
			return nil
		}
		return &leasestore.StaleTokenError{Job: job, Token: token, Current: doc.LastToken, Live: live}
	})
}
