package leasestore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Embedded is the store in a local file, for leasectl processes on one host.
// Each namespace is one bbolt database file in the store's folder; every
// operation opens it, runs one transaction under a file lock and closes it
// again, so any number of processes can share it. Waiters are woken through
// file-system notifications (inotify, kqueue).
type Embedded struct {
	dir       string
	dbPath    string
	lockPath  string
	notifyDir string
	// sem is the in-process lock (a channel, so waiting for it respects
	// ctx): one operation at a time per Embedded, and no OS thread blocked
	// in flock per waiting goroutine.
	sem chan struct{}
}

var _ Store = (*Embedded)(nil)

// OpenEmbedded opens the embedded store for namespace in dir, creating the
// folder (0700) if needed. The files are created (0600) by the first
// operation that writes: <namespace>.db, <namespace>.lock and, for waiters,
// the folder <namespace>.notify. Opening is cheap: it does no file I/O
// beyond creating the folder.
func OpenEmbedded(dir, namespace string) (*Embedded, error) {
	if err := ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, &UnavailableError{Op: "open", Err: fmt.Errorf("creating the embedded store folder: %w", err)}
	}
	base := filepath.Join(dir, fileName(namespace))
	return &Embedded{
		dir:       dir,
		dbPath:    base + ".db",
		lockPath:  base + ".lock",
		notifyDir: base + ".notify",
		sem:       make(chan struct{}, 1),
	}, nil
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
func (e *Embedded) clock() time.Time {
	return time.Now().UTC().Truncate(time.Microsecond)
}

// Close releases nothing: the database file is open only during an
// operation. Subscriptions are closed on their own.
func (e *Embedded) Close() error { return nil }

// jobDoc is everything the store keeps about one job, stored as JSON.
type jobDoc struct {
	LastToken   int64        `json:"last_token,omitempty"`
	Attempts    int64        `json:"attempts,omitempty"`
	Crashes     int          `json:"crashes,omitempty"`
	MaxCrashes  int          `json:"max_crashes,omitempty"` // threshold of the last run
	LastHolder  string       `json:"last_holder,omitempty"`
	LastHost    string       `json:"last_host,omitempty"`
	LastSuccess time.Time    `json:"last_success,omitzero"`
	Quarantine  *Quarantine  `json:"quarantine,omitempty"`
	LastOutcome *LastOutcome `json:"last_outcome,omitempty"`
	Run         *runDoc      `json:"run,omitempty"`
	// Events counts the history events ever recorded; the newest
	// HistoryLimit are kept in bucketHistory.
	Events int64 `json:"events,omitempty"`
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
	return &QuarantinedError{Quarantine: *d.Quarantine}
}

// crash describes the job's run as a crash detected at now, counted as the
// next consecutive one.
func (d *jobDoc) crash(id string, now time.Time) *Crash {
	r := d.Run
	return &Crash{
		Job: id, Holder: r.Holder, Host: r.Host, PID: r.PID, Token: r.Token,
		Command: r.Command, StartedAt: r.Started, StaleSince: r.LiveUntil, DetectedAt: now,
		Crashes: d.Crashes + 1,
	}
}

// holder describes the run as a live lease.
func (r *runDoc) holder(id string) *Holder {
	return &Holder{
		Job: id, Worker: r.Holder, Host: r.Host, PID: r.PID, Token: r.Token, Attempt: r.Attempt,
		Command: r.Command, StartedAt: r.Started, ExpiresAt: r.LiveUntil,
	}
}

// consumeCrash counts the job's current run as a crash, exactly once: it
// deletes the evidence in the same transaction, quarantines the job at the
// run's own threshold and wakes waiters.
func (t *txn) consumeCrash(id string, doc *jobDoc, detail string) (*Crash, error) {
	c := doc.crash(id, t.now)
	r := doc.Run
	doc.Crashes = c.Crashes
	if err := t.record(id, doc, Event{Kind: EventCrashed, Worker: r.Holder, Token: r.Token, Detail: detail}); err != nil {
		return nil, err
	}
	if err := t.setRun(id, doc, nil); err != nil {
		return nil, err
	}
	if doc.Crashes >= r.MaxCrashes {
		reason := fmt.Sprintf("%d consecutive crashes", doc.Crashes)
		doc.Quarantine = &Quarantine{
			Job: id, Crashes: doc.Crashes, Since: t.now, Reason: reason, By: quarantinedByLeasectl,
			LastHolder: r.Holder, LastHost: r.Host,
		}
		err := t.record(id, doc, Event{Kind: EventQuarantined, Worker: r.Holder, Token: r.Token,
			Detail: "by " + quarantinedByLeasectl + ": " + reason})
		if err != nil {
			return nil, err
		}
		if err := t.setQuarantined(id, true); err != nil {
			return nil, err
		}
		c.Quarantined = true
	}
	t.notify = append(t.notify, id)
	return c, nil
}

// quarantinedByLeasectl is Quarantine.By for a job quarantined for crashing.
const quarantinedByLeasectl = "leasectl"

// staleDetail is the history detail of a crash found by Acquire or Scan.
func staleDetail(r *runDoc, by string) string {
	return fmt.Sprintf("supervisor vanished: liveness expired at %s, found by %s",
		r.LiveUntil.Format(time.RFC3339Nano), by)
}

// outcomeDetail is the history detail of a released run, e.g. "completed
// exit 0 after 1.2s" or "failed signal 15 after 3s (max-runtime)".
func outcomeDetail(out Outcome) string {
	var b strings.Builder
	b.WriteString(string(out.Result))
	if out.Signal != 0 {
		fmt.Fprintf(&b, " signal %d", out.Signal)
	} else {
		fmt.Fprintf(&b, " exit %d", out.ExitCode)
	}
	if out.Duration > 0 {
		fmt.Fprintf(&b, " after %s", out.Duration.Round(time.Millisecond))
	}
	if out.Reason != "" {
		fmt.Fprintf(&b, " (%s)", out.Reason)
	}
	return b.String()
}

// Acquire grants the lease on req.Job; see Store.
func (e *Embedded) Acquire(ctx context.Context, req AcquireRequest) (*Lease, error) {
	var lease *Lease
	err := e.update(ctx, "acquire", func(t *txn) (err error) {
		lease, err = t.acquire(req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return lease, nil
}

// acquire is Acquire within a transaction.
func (t *txn) acquire(req AcquireRequest) (*Lease, error) {
	doc, err := t.job(req.Job)
	if err != nil {
		return nil, err
	}
	if doc.Quarantine != nil {
		return nil, doc.quarantinedError()
	}
	if doc.live(t.now) {
		r := doc.Run
		return nil, &HeldError{Job: req.Job, Holder: r.Holder, Host: r.Host, PID: r.PID, Token: r.Token,
			Since: r.Started, ExpiresIn: r.LiveUntil.Sub(t.now)}
	}
	var recovered *Crash
	if doc.crashed(t.now) {
		if recovered, err = t.consumeCrash(req.Job, doc, staleDetail(doc.Run, "acquire")); err != nil {
			return nil, err
		}
		if recovered.Quarantined {
			if err := t.putJob(req.Job, doc); err != nil {
				return nil, err
			}
			return nil, doc.quarantinedError()
		}
	}
	if req.MinInterval > 0 && !doc.LastSuccess.IsZero() {
		if age := t.now.Sub(doc.LastSuccess); age < req.MinInterval {
			if recovered != nil {
				if err := t.putJob(req.Job, doc); err != nil {
					return nil, err
				}
			}
			return nil, &TooSoonError{Job: req.Job, LastSuccess: doc.LastSuccess, MinInterval: req.MinInterval, Age: age}
		}
	}
	token := max(doc.LastToken+1, t.now.UnixMicro())
	doc.Attempts++
	run := &runDoc{
		Holder: req.Holder, Token: token, Host: req.Host, PID: req.PID, Command: req.Command,
		Started: t.now, Attempt: doc.Attempts, TTL: req.TTL, EvidenceTTL: req.EvidenceTTL,
		MaxCrashes: req.MaxCrashes, LiveUntil: expiry(t.now, req.TTL), EvidenceUntil: expiry(t.now, req.EvidenceTTL),
	}
	// This also drops a previous run whose evidence expired unseen.
	if err := t.setRun(req.Job, doc, run); err != nil {
		return nil, err
	}
	doc.LastToken = token
	doc.MaxCrashes = req.MaxCrashes
	doc.LastHolder = req.Holder
	doc.LastHost = req.Host
	err = t.record(req.Job, doc, Event{Kind: EventAcquired, Worker: req.Holder, Token: token,
		Detail: fmt.Sprintf("attempt %d on %s pid %d", doc.Attempts, req.Host, req.PID)})
	if err != nil {
		return nil, err
	}
	if err := t.putJob(req.Job, doc); err != nil {
		return nil, err
	}
	return &Lease{Job: req.Job, Holder: req.Holder, Token: token, Attempt: doc.Attempts,
		TTL: req.TTL, GrantedAt: t.now, Recovered: recovered}, nil
}

// Renew extends l's liveness and its run's evidence; see Store.
func (e *Embedded) Renew(ctx context.Context, l *Lease) error {
	return e.update(ctx, "renew", func(t *txn) error {
		doc, err := t.job(l.Job)
		if err != nil {
			return err
		}
		r := doc.Run
		if doc.live(t.now) && r.Holder == l.Holder && r.Token == l.Token {
			renewed := *r
			renewed.LiveUntil = expiry(t.now, l.TTL)
			renewed.EvidenceUntil = expiry(t.now, r.EvidenceTTL)
			if err := t.setRun(l.Job, doc, &renewed); err != nil {
				return err
			}
			return t.putJob(l.Job, doc)
		}
		if doc.evidence(t.now) && r.Token == l.Token {
			err := t.record(l.Job, doc, Event{Kind: EventLeaseLost, Worker: l.Holder, Token: l.Token,
				Detail: "renewal came after the lease expired"})
			if err != nil {
				return err
			}
			if err := t.putJob(l.Job, doc); err != nil {
				return err
			}
		}
		return fmt.Errorf("renew job %q token %d: %w", l.Job, l.Token, ErrLeaseLost)
	})
}

// Release ends l with outcome out; see Store.
func (e *Embedded) Release(ctx context.Context, l *Lease, out Outcome) error {
	return e.update(ctx, "release", func(t *txn) error {
		doc, err := t.job(l.Job)
		if err != nil {
			return err
		}
		if !doc.evidence(t.now) || doc.Run.Token != l.Token {
			return fmt.Errorf("release job %q token %d: %w", l.Job, l.Token, ErrLeaseLost)
		}
		r := doc.Run
		doc.LastOutcome = &LastOutcome{Outcome: out, Worker: r.Holder, Token: r.Token, FinishedAt: t.now}
		if out.Result == ResultCrashed {
			if _, err := t.consumeCrash(l.Job, doc, outcomeDetail(out)); err != nil {
				return err
			}
			return t.putJob(l.Job, doc)
		}
		if out.Result == ResultCompleted {
			doc.Crashes = 0
			doc.LastSuccess = t.now
		}
		err = t.record(l.Job, doc, Event{Kind: EventReleased, Worker: r.Holder, Token: r.Token, Detail: outcomeDetail(out)})
		if err != nil {
			return err
		}
		if err := t.setRun(l.Job, doc, nil); err != nil {
			return err
		}
		t.notify = append(t.notify, l.Job)
		return t.putJob(l.Job, doc)
	})
}

// Scan counts every run whose evidence is there without liveness as a
// crash; see Store. It reads only the in-flight runs whose liveness expired.
func (e *Embedded) Scan(ctx context.Context) ([]Crash, error) {
	var crashes []Crash
	err := e.update(ctx, "scan", func(t *txn) error {
		for _, id := range t.inFlight(true) {
			doc, err := t.job(id)
			if err != nil {
				return err
			}
			if doc.crashed(t.now) {
				c, err := t.consumeCrash(id, doc, staleDetail(doc.Run, "scan"))
				if err != nil {
					return err
				}
				crashes = append(crashes, *c)
			} else if err := t.setRun(id, doc, nil); err != nil {
				// The evidence expired unseen: like an expired Redis key, the
				// run is gone without being counted.
				return err
			}
			if err := t.putJob(id, doc); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return crashes, nil
}

// Quarantine puts job in quarantine by an operator's decision; see Store.
func (e *Embedded) Quarantine(ctx context.Context, job string, note Note) error {
	return e.update(ctx, "quarantine", func(t *txn) error {
		doc, err := t.job(job)
		if err != nil {
			return err
		}
		if doc.Quarantine == nil {
			doc.Quarantine = &Quarantine{Job: job, Since: t.now, LastHolder: doc.LastHolder, LastHost: doc.LastHost}
		}
		doc.Quarantine.By = note.By
		doc.Quarantine.Reason = note.Reason
		doc.Quarantine.Crashes = doc.Crashes
		if err := t.record(job, doc, Event{Kind: EventQuarantined, Worker: note.By, Detail: noteDetail(note)}); err != nil {
			return err
		}
		if err := t.setQuarantined(job, true); err != nil {
			return err
		}
		return t.putJob(job, doc)
	})
}

// ReleaseQuarantine lets job run again and resets its crash count; see
// Store.
func (e *Embedded) ReleaseQuarantine(ctx context.Context, job string, note Note) error {
	return e.update(ctx, "release quarantine", func(t *txn) error {
		doc, err := t.job(job)
		if err != nil {
			return err
		}
		if doc.Quarantine == nil {
			return fmt.Errorf("job %q: %w", job, ErrNotQuarantined)
		}
		doc.Quarantine = nil
		doc.Crashes = 0
		if err := t.record(job, doc, Event{Kind: EventUnquarantine, Worker: note.By, Detail: noteDetail(note)}); err != nil {
			return err
		}
		if err := t.setQuarantined(job, false); err != nil {
			return err
		}
		t.notify = append(t.notify, job)
		return t.putJob(job, doc)
	})
}

func noteDetail(note Note) string {
	return fmt.Sprintf("by %s: %s", note.By, note.Reason)
}

// Quarantined lists the quarantined jobs, ordered by job.
func (e *Embedded) Quarantined(ctx context.Context) ([]Quarantine, error) {
	var list []Quarantine
	err := e.view(ctx, "list quarantined", func(t *txn) error {
		b := t.bucket(bucketQuarantined)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			doc, err := t.job(string(k))
			if err != nil {
				return err
			}
			if doc.Quarantine != nil {
				list = append(list, *doc.Quarantine)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return list, nil
}

// Status reports job's state, holder, counters and history; see Store.
func (e *Embedded) Status(ctx context.Context, job string) (*JobStatus, error) {
	var st *JobStatus
	err := e.view(ctx, "status", func(t *txn) error {
		doc, err := t.job(job)
		if err != nil {
			return err
		}
		history, err := t.history(job)
		if err != nil {
			return err
		}
		st = &JobStatus{
			Job: job, State: StateIdle, Now: t.now, LastToken: doc.LastToken, Attempts: doc.Attempts,
			Crashes: doc.Crashes, MaxCrashes: doc.MaxCrashes, Quarantine: doc.Quarantine,
			LastOutcome: doc.LastOutcome, LastSuccess: doc.LastSuccess, History: history,
		}
		if doc.live(t.now) {
			st.Holder = doc.Run.holder(job)
		}
		switch {
		case doc.Quarantine != nil:
			st.State = StateQuarantined
		case st.Holder != nil:
			st.State = StateRunning
		case doc.crashed(t.now):
			st.State = StateCrashed
			st.Crashed = doc.crash(job, t.now)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// Leases lists the live leases, ordered by job.
func (e *Embedded) Leases(ctx context.Context) ([]Holder, error) {
	var leases []Holder
	err := e.view(ctx, "list leases", func(t *txn) error {
		for _, id := range t.inFlight(false) {
			doc, err := t.job(id)
			if err != nil {
				return err
			}
			if doc.live(t.now) {
				h := doc.Run.holder(id)
				h.ReadAt = t.now
				leases = append(leases, *h)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(leases, func(a, b Holder) int { return strings.Compare(a.Job, b.Job) })
	return leases, nil
}

// Counts returns the number of live leases and of quarantined jobs.
func (e *Embedded) Counts(ctx context.Context) (Counts, error) {
	var c Counts
	err := e.view(ctx, "count", func(t *txn) error {
		c.InFlight = len(t.inFlight(false))
		if b := t.bucket(bucketQuarantined); b != nil {
			c.Quarantined = b.Stats().KeyN
		}
		return nil
	})
	return c, err
}

// CheckToken returns nil when token is job's current fencing token and its
// lease is live; see Store.
func (e *Embedded) CheckToken(ctx context.Context, job string, token int64) error {
	return e.view(ctx, "check token", func(t *txn) error {
		doc, err := t.job(job)
		if err != nil {
			return err
		}
		live := doc.live(t.now) && doc.Run.Token == doc.LastToken
		if token == doc.LastToken && live {
			return nil
		}
		return &StaleTokenError{Job: job, Token: token, Current: doc.LastToken, Live: live}
	})
}
