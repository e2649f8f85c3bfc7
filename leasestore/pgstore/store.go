package pgstore

import (
	"context"
	"crypto/tls"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasectl/leasectl/leasestore"
)

const (
	// scanBatch is how many expired runs one scan transaction locks and
	// counts. Larger batches mean fewer round trips but hold the jobs'
	// locks (and so their renewals) for longer: 1,000 crashes take a few
	// tens of milliseconds.
	scanBatch = 1000

	// closeTimeout bounds how long closing a connection waits for the
	// server, which may be frozen.
	closeTimeout = time.Second
)

// Store is the leasestore.Driver kept in PostgreSQL, shared by many hosts.
// Each namespace is one schema: its tables and the functions that are the
// only way leasectl changes them, each operation one function call and so
// one transaction. Waiters are woken with LISTEN/NOTIFY.
type Store struct {
	// book keeps the notices in the notices table (notices.go): its
	// methods are the Store's.
	*book
	cfg      *pgconn.Config
	ns       string
	addr     string // for messages
	password string // only to scrub it from messages
	// preferTLS is the TLS configuration of a sslmode=prefer URL, which
	// dial asks the server for on the connection itself (tlsprefer.go).
	preferTLS *tls.Config

	idle   chan *pgconn.PgConn // connections waiting for a call
	slots  chan struct{}       // one per open connection, up to poolSize
	closed atomic.Bool

	// migrateMu makes the calls of one Store wait for one migration.
	migrateMu sync.Mutex

	// The token feed (tokenfeed.go), started by the portable Store's first
	// WatchTokens.
	feedMu sync.Mutex
	feed   *tokenFeed

	// The statement of each operation.
	sqlAcquire, sqlRenew, sqlRelease, sqlRecordLate, sqlScan, sqlQuarantine string
	sqlUnquarantine, sqlStatus, sqlLeases, sqlQuarantined, sqlCounts        string
	sqlCheckToken, sqlStop, sqlJobs                                         string
	sqlExpect, sqlOverdue, sqlLeave                                         string
}

var _ leasestore.Driver = (*Store)(nil)

// prepareStatements writes the statement of each operation: a call of its
// function in the namespace's schema, every argument cast to the
// parameter's type (arguments travel as text).
func (s *Store) prepareStatements() {
	call := s.statement
	s.sqlAcquire = call("acquire", "integer", "text", "text", "text", "integer", "text[]", "bigint", "bigint", "integer", "bigint",
		"text", "bigint", "bigint", "bigint", "integer", "boolean")
	s.sqlRenew = call("renew", "integer", "text", "text", "bigint", "bigint", "bigint")
	s.sqlRelease = call("release", "integer", "text", "bigint", "text", "integer", "integer", "bigint", "text", "text")
	s.sqlRecordLate = call("recordlate", "integer", "text", "text", "bigint", "text", "integer", "integer", "bigint", "text",
		"text")
	s.sqlScan = call("scan", "integer", "integer")
	s.sqlQuarantine = call("quarantine", "integer", "text", "text", "text")
	s.sqlUnquarantine = call("unquarantine", "integer", "text", "text", "text")
	s.sqlStatus = call("status", "integer", "text")
	s.sqlLeases = call("leases", "integer")
	s.sqlQuarantined = call("quarantined", "integer")
	s.sqlCounts = call("counts", "integer")
	s.sqlCheckToken = call("checktoken", "integer", "text", "bigint")
	s.sqlStop = call("stop", "integer", "text", "text", "text")
	s.sqlJobs = call("jobs", "integer", "text", "integer")
	s.sqlExpect = call("expect", "integer", "text", "bigint", "bigint", "text", "text")
	s.sqlOverdue = call("overdue", "integer")
	s.sqlLeave = call("leave", "integer", "text", "text")
}

// statement is a call of function fn of the namespace's schema, every
// argument cast to its parameter's type in types (arguments travel as
// text).
func (s *Store) statement(fn string, types ...string) string {
	args := make([]string, len(types))
	for i, t := range types {
		args[i] = "$" + strconv.Itoa(i+1) + "::" + t
	}
	return "SELECT " + quoteIdent(schemaName(s.ns)) + "." + fn + "(" + strings.Join(args, ", ") + ")"
}

// Close closes the store's connections and its token feed, whose watches
// hear nothing more. Subscriptions are closed on their own.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.closeFeed()
	for {
		select {
		case c := <-s.idle:
			s.discard(c)
		default:
			return nil
		}
	}
}

// Argument encoding: every argument travels as text.

func version() []byte               { return []byte(strconv.Itoa(schemaVersion)) }
func integer(n int64) []byte        { return []byte(strconv.FormatInt(n, 10)) }
func micros(d time.Duration) []byte { return integer(d.Microseconds()) }
func boolean(b bool) []byte         { return []byte(strconv.FormatBool(b)) }

// text checks that every s can be kept as PostgreSQL text: valid UTF-8
// without NUL bytes. leasectl's own values always are; the check keeps a
// bad --worker-id from failing inside the server.
func text(ss ...string) error {
	for _, s := range ss {
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			return fmt.Errorf("leasestore: %q is not UTF-8 text without NUL bytes, which the PostgreSQL store needs", s)
		}
	}
	return nil
}

// textArray is args as a PostgreSQL array literal. Arguments that are not
// valid UTF-8 (a file name in another encoding) are kept with U+FFFD in
// place of the bad bytes: the command is shown to people, never compared.
func textArray(args []string) []byte {
	var b strings.Builder
	b.WriteByte('{')
	for i, a := range args {
		if i > 0 {
			b.WriteByte(',')
		}
		a = strings.ReplaceAll(strings.ToValidUTF8(a, "\uFFFD"), "\x00", "\uFFFD")
		b.WriteByte('"')
		for _, r := range a {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return []byte(b.String())
}

// Acquire grants the lease on req.Job; see leasestore.Store.
func (s *Store) Acquire(ctx context.Context, req leasestore.AcquireRequest) (*leasestore.Lease, error) {
	if err := text(req.Holder, req.Host, req.Region); err != nil {
		return nil, err
	}
	var deadline int64
	if !req.Deadline.IsZero() {
		deadline = max(req.Deadline.UnixMicro(), 1) // 0 means none
	}
	every, grace := expectArgs(req.Expect)
	var a acquireReply
	err := s.call(ctx, "acquire", s.sqlAcquire, &a, version(), []byte(req.Job), []byte(req.Holder), []byte(req.Host),
		integer(int64(req.PID)), textArray(req.Command), micros(req.TTL), micros(req.EvidenceTTL),
		integer(int64(req.MaxCrashes)), micros(req.MinInterval), []byte(req.Region), integer(deadline), every, grace,
		integer(int64(req.Slots)), boolean(req.Wait))
	if err != nil {
		return nil, err
	}
	now := usTime(a.Now)
	switch a.Kind {
	case "gaveup":
		return nil, fmt.Errorf("acquire job %q: worker %s gave up on it: %w", req.Job, req.Holder, leasestore.ErrLeaseLost)
	case "ok":
		l := &leasestore.Lease{Job: req.Job, Holder: req.Holder, Token: a.Token, Attempt: a.Attempt, Slot: a.Slot, TTL: req.TTL,
			GrantedAt: now}
		if a.Recovered != nil {
			l.Recovered = a.Recovered.crash()
		}
		return l, nil
	case "held":
		return nil, a.held(req.Job, now)
	case "slots":
		return nil, &leasestore.SlotsError{Job: req.Job, Slots: a.Slots, Requested: max(req.Slots, 1)}
	case "quarantined":
		return nil, &leasestore.QuarantinedError{Quarantine: a.Quarantine.quarantine()}
	case "region":
		return nil, &leasestore.RegionError{Job: req.Job, Region: a.Region, Requested: req.Region}
	case "deadline":
		return nil, &leasestore.DeadlineError{Job: req.Job, Deadline: req.Deadline, Now: now}
	case "toosoon":
		last := usTime(a.LastSuccess)
		return nil, &leasestore.TooSoonError{Job: req.Job, LastSuccess: last, MinInterval: req.MinInterval, Age: now.Sub(last)}
	default:
		return nil, s.unavailable("acquire", fmt.Errorf("unexpected answer %q from the acquire function", a.Kind))
	}
}

// Renew extends l's liveness and its evidence; see leasestore.Store.
func (s *Store) Renew(ctx context.Context, l *leasestore.Lease) error {
	if err := text(l.Holder); err != nil {
		return err
	}
	var r renewReply
	err := s.call(ctx, "renew", s.sqlRenew, &r, version(), []byte(l.Job), []byte(l.Holder), integer(l.Token), micros(l.TTL),
		micros(l.RTT))
	if err != nil {
		return err
	}
	if !r.renewed {
		return fmt.Errorf("renew job %q token %d: %w", l.Job, l.Token, leasestore.ErrLeaseLost)
	}
	l.Stop = r.stop
	return nil
}

// Release ends l with outcome out; see leasestore.Store.
func (s *Store) Release(ctx context.Context, l *leasestore.Lease, out leasestore.Outcome) error {
	if err := text(out.Reason); err != nil {
		return err
	}
	var ok bool
	err := s.call(ctx, "release", s.sqlRelease, &ok, version(), []byte(l.Job), integer(l.Token), []byte(out.Result),
		integer(int64(out.ExitCode)), integer(int64(out.Signal)), integer(int64(out.Duration)), []byte(out.Reason),
		[]byte(out.Detail()))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("release job %q token %d: %w", l.Job, l.Token, leasestore.ErrLeaseLost)
	}
	return nil
}

// Scan counts the crashes of runs whose liveness expired; see
// leasestore.Store. Each batch of up to scanBatch expired runs is one
// transaction; a full batch is followed by another. Runs whose job another
// transaction holds (another reaper, an acquire) are skipped, not waited
// for. On an error it also returns the crashes counted before.
func (s *Store) Scan(ctx context.Context) ([]leasestore.Crash, error) {
	var crashes []leasestore.Crash
	for {
		var r scanReply
		if err := s.call(ctx, "scan", s.sqlScan, &r, version(), integer(scanBatch)); err != nil {
			return crashes, err
		}
		for _, c := range r.Crashes {
			crashes = append(crashes, *c.crash())
		}
		if r.Examined < scanBatch {
			return crashes, nil
		}
	}
}

// Quarantine puts job in quarantine by an operator's decision; see
// leasestore.Store.
func (s *Store) Quarantine(ctx context.Context, job string, note leasestore.Note) error {
	if err := text(note.By, note.Reason); err != nil {
		return err
	}
	var ok bool
	return s.call(ctx, "quarantine", s.sqlQuarantine, &ok, version(), []byte(job), []byte(note.By), []byte(note.Reason))
}

// ReleaseQuarantine lets job run again; see leasestore.Store.
func (s *Store) ReleaseQuarantine(ctx context.Context, job string, note leasestore.Note) error {
	if err := text(note.By, note.Reason); err != nil {
		return err
	}
	var ok bool
	err := s.call(ctx, "release quarantine", s.sqlUnquarantine, &ok, version(), []byte(job), []byte(note.By), []byte(note.Reason))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("job %q: %w", job, leasestore.ErrNotQuarantined)
	}
	return nil
}

// Stop asks job's running child to stop; see leasestore.Store.
func (s *Store) Stop(ctx context.Context, job string, note leasestore.Note) error {
	if err := text(note.By, note.Reason); err != nil {
		return err
	}
	var ok bool
	if err := s.call(ctx, "stop", s.sqlStop, &ok, version(), []byte(job), []byte(note.By), []byte(note.Reason)); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("stop job %q: %w", job, leasestore.ErrNotRunning)
	}
	return nil
}

// Jobs lists the known jobs whose IDs start with prefix, ordered, at most
// limit of them; see leasestore.Store.
func (s *Store) Jobs(ctx context.Context, prefix string, limit int) ([]string, error) {
	var jobs []string
	if err := s.call(ctx, "list jobs", s.sqlJobs, &jobs, version(), []byte(prefix), integer(int64(max(limit, 0)))); err != nil {
		return nil, err
	}
	return jobs, nil
}

// Quarantined lists the quarantined jobs, ordered by job.
func (s *Store) Quarantined(ctx context.Context) ([]leasestore.Quarantine, error) {
	var list []quarantineReply
	if err := s.call(ctx, "list quarantined", s.sqlQuarantined, &list, version()); err != nil {
		return nil, err
	}
	qs := make([]leasestore.Quarantine, len(list))
	for i, q := range list {
		qs[i] = q.quarantine()
	}
	return qs, nil
}

// Status reports job's state, holder, counters and history; see
// leasestore.Store.
func (s *Store) Status(ctx context.Context, job string) (*leasestore.JobStatus, error) {
	var r statusReply
	if err := s.call(ctx, "status", s.sqlStatus, &r, version(), []byte(job)); err != nil {
		return nil, err
	}
	return r.status(job), nil
}

// Leases lists the live leases, one per slot in use, ordered by job and
// slot.
func (s *Store) Leases(ctx context.Context) ([]leasestore.Holder, error) {
	var r leasesReply
	if err := s.call(ctx, "list leases", s.sqlLeases, &r, version()); err != nil {
		return nil, err
	}
	list := make([]leasestore.Holder, len(r.Leases))
	for i, l := range r.Leases {
		list[i] = *l.holder(l.Job)
		list[i].ReadAt = usTime(r.Now)
	}
	return list, nil
}

// Counts returns the number of live leases and of quarantined jobs.
func (s *Store) Counts(ctx context.Context) (leasestore.Counts, error) {
	var r struct {
		InFlight    int `json:"inflight"`
		Quarantined int `json:"quarantined"`
	}
	if err := s.call(ctx, "count", s.sqlCounts, &r, version()); err != nil {
		return leasestore.Counts{}, err
	}
	return leasestore.Counts{InFlight: r.InFlight, Quarantined: r.Quarantined}, nil
}

// CheckToken returns nil when token is a current fencing token of job: of
// a job of one slot, its last token while that run is live; of a job of
// several, the token of any live run. See leasestore.Store.
func (s *Store) CheckToken(ctx context.Context, job string, token int64) error {
	var r checkTokenReply
	if err := s.call(ctx, "check token", s.sqlCheckToken, &r, version(), []byte(job), integer(token)); err != nil {
		return err
	}
	if r.OK {
		return nil
	}
	return &leasestore.StaleTokenError{Job: job, Token: token, Current: r.Current, Live: r.Live}
}

// Limits are leasestore.MaxSlots slots and every positive TTL: a job's
// runs are rows of their own, each transition reads and writes those of
// its job; see leasestore.Driver.
func (s *Store) Limits() leasestore.Limits { return leasestore.Limits{MaxSlots: leasestore.MaxSlots} }

// Leave takes holder out of job's queue of waiters; see leasestore.Leaser.
func (s *Store) Leave(ctx context.Context, job, holder string) error {
	if err := text(holder); err != nil {
		return err
	}
	var ok bool
	return s.call(ctx, "leave the queue", s.sqlLeave, &ok, version(), []byte(job), []byte(holder))
}
