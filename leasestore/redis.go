package leasestore

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Redis layout, per job (all keys of one job share the hash tag {job}):
//
//	<ns>:{<job>}:e   evidence: one string, fields packed with NUL, whose
//	                 Redis TTL is the evidence TTL
//	<ns>:{<job>}:r   record: a small hash with one-or-two-letter fields
//	<ns>:{<job>}:h   history: a list of at most HistoryLimit packed events
//	<ns>:{<job>}:n   the release notification channel (not a key)
//
// and store-wide:
//
//	<ns>:live         sorted set: job -> liveness expiry (microseconds)
//	<ns>:quarantined  set of the quarantined jobs
//
// Deviation from the data model (DESIGN §5), for memory: liveness is not a
// key of its own. A job is live while its score in <ns>:live lies in the
// future and its evidence is there; holder and token live in the evidence.
// A separate liveness key (a string with a TTL: 197 bytes measured, with its
// expiry entry) would push an in-flight job from 359 bytes to ~560, past the
// 400-byte budget of DESIGN §8;
// the index entry exists anyway so that Scan costs what the crashed jobs
// cost. lua/lib.lua documents the packed formats.
//
// Redis Cluster: the per-job keys are hash-tagged, but the two store-wide
// keys are not, and scripts touch them together with the job's keys (Scan,
// Leases and Quarantined even reach jobs' keys by name). That is legal on a
// single Redis only; Cluster support would have to move the index.

//go:embed lua/lib.lua
var luaLib string

//go:embed lua/acquire.lua
var luaAcquire string

//go:embed lua/renew.lua
var luaRenew string

//go:embed lua/release.lua
var luaRelease string

//go:embed lua/scan.lua
var luaScan string

//go:embed lua/quarantine.lua
var luaQuarantine string

//go:embed lua/unquarantine.lua
var luaUnquarantine string

//go:embed lua/status.lua
var luaStatus string

//go:embed lua/checktoken.lua
var luaCheckToken string

//go:embed lua/leases.lua
var luaLeases string

//go:embed lua/quarantined.lua
var luaQuarantined string

//go:embed lua/counts.lua
var luaCounts string

// One script per transition, run with EVALSHA (falling back to EVAL when
// the server lost its script cache, e.g. after a restart). Each is built on
// first use: hashing all of them at start-up would cost every leasectl
// process, the watchdog included, for the one or two a command runs.
var (
	scriptAcquire      = newScript(luaAcquire)
	scriptRenew        = newScript(luaRenew)
	scriptRelease      = newScript(luaRelease)
	scriptScan         = newScript(luaScan)
	scriptQuarantine   = newScript(luaQuarantine)
	scriptUnquarantine = newScript(luaUnquarantine)
	scriptStatus       = newScript(luaStatus)
	scriptCheckToken   = newScript(luaCheckToken)
	scriptLeases       = newScript(luaLeases)
	scriptQuarantined  = newScript(luaQuarantined)
	scriptCounts       = newScript(luaCounts)
)

// newScript returns the script made of the shared helpers and body, built
// (and its SHA1 computed) once, on first use.
func newScript(body string) func() *redis.Script {
	return sync.OnceValue(func() *redis.Script {
		return redis.NewScript(fmt.Sprintf("local HISTORY_LIMIT = %d\n", HistoryLimit) + luaLib + body)
	})
}

const (
	// redisPoolSize bounds the connections one client opens. A supervisor
	// makes one call at a time (plus a subscription, which has its own
	// connection); the reaper and the inspection commands a few.
	redisPoolSize = 4

	// scanBatch is how many expired index entries one Scan script handles.
	// Larger batches mean fewer round trips but hold Redis (and every other
	// client's renewals) for longer: 1,000 crashes take a few milliseconds.
	scanBatch = 1000

	// sep separates packed fields; see lua/lib.lua.
	sep = "\x00"

	// evidenceFields is how many fields precede the command arguments in
	// packed evidence.
	evidenceFields = 9
)

// Redis is the Store kept in a Redis server, shared by many hosts.
type Redis struct {
	rdb      *redis.Client
	ns       string
	addr     string
	password string // only to scrub it from error messages
}

// OpenRedis returns a Store on the Redis at rawURL (redis:// or rediss://
// with optional user, password and database), keeping its keys under
// namespace. It does not contact the server: the first call does, so
// start-up costs no extra round trip. ctx is unused for now; connection
// set-up is bounded by each call's own ctx.
func OpenRedis(ctx context.Context, rawURL, namespace string) (*Redis, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("invalid store URL %s: not a URL", Redact(rawURL))
	}
	password, _ := u.User.Password()
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("invalid store URL %s: %s", Redact(rawURL), scrub(err.Error(), password))
	}
	// Never retry a command: a retried acquire or release could act twice.
	// The caller's ctx bounds socket I/O, so a frozen Redis returns at the
	// caller's deadline. RESP2 without client identity spares the extra
	// handshake round trips of RESP3 (maintenance notifications, CLIENT
	// SETINFO); one dial attempt, since callers retry on their own terms.
	opt.MaxRetries = -1
	opt.ContextTimeoutEnabled = true
	opt.Protocol = 2
	opt.DisableIdentity = true
	opt.DialerRetries = 1
	opt.PoolSize = redisPoolSize
	silenceRedisLogs.Do(func() { redis.SetLogger(discardLogger{}) })
	return &Redis{rdb: redis.NewClient(opt), ns: namespace, addr: opt.Addr, password: password}, nil
}

// silenceRedisLogs stops go-redis from printing its own diagnostics on
// stderr, which leasectl shares with the child and its structured log: every
// failure it would print also comes back as an error.
var silenceRedisLogs sync.Once

// discardLogger is a go-redis logger that drops everything.
type discardLogger struct{}

// Printf drops the message.
func (discardLogger) Printf(context.Context, string, ...any) {}

// Close closes the client's connections.
func (s *Redis) Close() error {
	if err := s.rdb.Close(); err != nil {
		return fmt.Errorf("close Redis client: %w", err)
	}
	return nil
}

// keys are the declared KEYS of every per-job script: evidence, record,
// history, index, quarantine set (lua/lib.lua, declared_keys).
func (s *Redis) keys(job string) []string {
	p := s.ns + ":{" + job + "}:"
	return []string{p + "e", p + "r", p + "h", s.indexKey(), s.quarantinedKey()}
}

func (s *Redis) indexKey() string       { return s.ns + ":live" }
func (s *Redis) quarantinedKey() string { return s.ns + ":quarantined" }
func (s *Redis) channel(job string) string {
	return s.ns + ":{" + job + "}:n"
}

// run runs script and returns its reply, or an *UnavailableError for op.
func (s *Redis) run(ctx context.Context, op string, script func() *redis.Script, keys []string, args ...any) (any, error) {
	v, err := script().Run(ctx, s.rdb, keys, args...).Result()
	if err != nil {
		return nil, s.unavailable(op, err)
	}
	return v, nil
}

// Acquire grants the lease on req.Job; see Store.
func (s *Redis) Acquire(ctx context.Context, req AcquireRequest) (*Lease, error) {
	if err := noNUL(append([]string{req.Holder, req.Host}, req.Command...)...); err != nil {
		return nil, err
	}
	var command strings.Builder
	for _, a := range req.Command {
		command.WriteString(sep)
		command.WriteString(a)
	}
	v, err := s.run(ctx, "acquire", scriptAcquire, s.keys(req.Job),
		s.ns, req.Job, req.Holder, millis(req.TTL), millis(req.EvidenceTTL), req.MaxCrashes,
		req.MinInterval.Microseconds(), req.Host, req.PID, command.String())
	if err != nil {
		return nil, err
	}
	r := reply{op: "acquire", v: v}
	kind, now := r.str(0), r.time(1)
	switch kind {
	case "held":
		ev := r.evidence(2)
		expiry := r.time(3)
		if r.err != nil {
			return nil, r.err
		}
		return nil, &HeldError{Job: req.Job, Holder: ev.worker, Host: ev.host, PID: ev.pid, Token: ev.token,
			Since: ev.started, ExpiresIn: expiry.Sub(now)}
	case "quarantined":
		q := r.quarantine(req.Job, 2)
		if r.err != nil {
			return nil, r.err
		}
		return nil, &QuarantinedError{Quarantine: q}
	case "toosoon":
		last := r.time(2)
		if r.err != nil {
			return nil, r.err
		}
		return nil, &TooSoonError{Job: req.Job, LastSuccess: last, MinInterval: req.MinInterval, Age: now.Sub(last)}
	case "ok":
		l := &Lease{Job: req.Job, Holder: req.Holder, Token: r.int(2), Attempt: r.int(3), TTL: req.TTL, GrantedAt: now}
		if r.str(4) != "" {
			l.Recovered = r.crash(req.Job, 4, now)
		}
		if r.err != nil {
			return nil, r.err
		}
		return l, nil
	default:
		return nil, s.unavailable("acquire", fmt.Errorf("unexpected reply %q from the acquire script", kind))
	}
}

// Renew extends l's liveness and its evidence; see Store.
func (s *Redis) Renew(ctx context.Context, l *Lease) error {
	v, err := s.run(ctx, "renew", scriptRenew, s.keys(l.Job),
		s.ns, l.Job, l.Holder, l.Token, millis(l.TTL))
	if err != nil {
		return err
	}
	if v != int64(1) {
		return ErrLeaseLost
	}
	return nil
}

// Release ends l with outcome out; see Store.
func (s *Redis) Release(ctx context.Context, l *Lease, out Outcome) error {
	if err := noNUL(l.Holder, out.Reason); err != nil {
		return err
	}
	v, err := s.run(ctx, "release", scriptRelease, s.keys(l.Job),
		s.ns, l.Job, l.Token, l.Holder, string(out.Result), out.ExitCode, out.Signal,
		int64(out.Duration), out.Reason, outcomeDetail(out))
	if err != nil {
		return err
	}
	if v != int64(1) {
		return ErrLeaseLost
	}
	return nil
}

// Scan counts the crashes of runs whose liveness expired; see Store. Each
// batch of scanBatch expired entries is one atomic script; on an error it
// also returns the crashes the batches before counted.
func (s *Redis) Scan(ctx context.Context) ([]Crash, error) {
	var crashes []Crash
	for {
		v, err := s.run(ctx, "scan", scriptScan, []string{s.indexKey(), s.quarantinedKey()}, s.ns, scanBatch)
		if err != nil {
			return crashes, err
		}
		r := reply{op: "scan", v: v}
		now, examined := r.time(0), r.int(1)
		for i := 2; i+4 < r.len() && r.err == nil; i += 5 {
			crashes = append(crashes, *r.crash(r.str(i), i+1, now))
		}
		if r.err != nil {
			return crashes, r.err
		}
		if examined < scanBatch {
			return crashes, nil
		}
	}
}

// Quarantine puts job in quarantine by an operator's decision; see Store.
func (s *Redis) Quarantine(ctx context.Context, job string, note Note) error {
	if err := noNUL(note.By, note.Reason); err != nil {
		return err
	}
	_, err := s.run(ctx, "quarantine", scriptQuarantine, s.keys(job), s.ns, job, note.By, note.Reason)
	return err
}

// ReleaseQuarantine lets job run again; see Store.
func (s *Redis) ReleaseQuarantine(ctx context.Context, job string, note Note) error {
	if err := noNUL(note.By, note.Reason); err != nil {
		return err
	}
	v, err := s.run(ctx, "release quarantine", scriptUnquarantine, s.keys(job), s.ns, job, note.By, note.Reason)
	if err != nil {
		return err
	}
	if v != int64(1) {
		return ErrNotQuarantined
	}
	return nil
}

// Quarantined lists the quarantined jobs, ordered by job.
func (s *Redis) Quarantined(ctx context.Context) ([]Quarantine, error) {
	v, err := s.run(ctx, "list quarantined", scriptQuarantined, []string{s.quarantinedKey()}, s.ns)
	if err != nil {
		return nil, err
	}
	r := reply{op: "list quarantined", v: v}
	var list []Quarantine
	for i := 0; i+6 < r.len() && r.err == nil; i += 7 {
		list = append(list, r.quarantine(r.str(i), i+1))
	}
	if r.err != nil {
		return nil, r.err
	}
	slices.SortFunc(list, func(a, b Quarantine) int { return strings.Compare(a.Job, b.Job) })
	return list, nil
}

// Status reports job's state, holder, counters and history; see Store.
func (s *Redis) Status(ctx context.Context, job string) (*JobStatus, error) {
	v, err := s.run(ctx, "status", scriptStatus, s.keys(job), s.ns, job)
	if err != nil {
		return nil, err
	}
	r := reply{op: "status", v: v}
	now := r.time(0)
	rec := r.record(3)
	st := &JobStatus{
		Job: job, State: StateIdle, Now: now,
		LastToken: rec.int("t"), Attempts: rec.int("a"), Crashes: int(rec.int("c")), MaxCrashes: int(rec.int("m")),
		LastSuccess: rec.time("s"), History: r.history(4),
	}
	if rec["q"] != "" {
		st.State = StateQuarantined
		st.Quarantine = &Quarantine{
			Job: job, Since: rec.time("q"), Reason: rec["qr"], By: rec["qb"], Crashes: int(rec.int("qc")),
			LastHolder: rec["lh"], LastHost: rec["lo"],
		}
	}
	if rec["o"] != "" {
		st.LastOutcome = &LastOutcome{
			Outcome: Outcome{
				Result: Result(rec["o"]), ExitCode: int(rec.int("oe")), Signal: int(rec.int("og")),
				Duration: time.Duration(rec.int("od")), Reason: rec["or"],
			},
			Worker: rec["ow"], Token: rec.int("ot"), FinishedAt: rec.time("of"),
		}
	}
	if r.str(1) != "" {
		ev := r.evidence(1)
		expiry := time.Time{}
		if r.str(2) != "" {
			expiry = r.time(2)
		}
		if expiry.After(now) {
			st.Holder = ev.holder(job, expiry)
			if st.State == StateIdle {
				st.State = StateRunning
			}
		} else {
			st.Crashed = ev.crash(job, expiry, now, st.Crashes+1, false)
			if st.State == StateIdle {
				st.State = StateCrashed
			}
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	return st, nil
}

// Leases lists the live leases, ordered by job.
func (s *Redis) Leases(ctx context.Context) ([]Holder, error) {
	v, err := s.run(ctx, "list leases", scriptLeases, []string{s.indexKey()}, s.ns)
	if err != nil {
		return nil, err
	}
	r := reply{op: "list leases", v: v}
	var list []Holder
	for i := 1; i+2 < r.len() && r.err == nil; i += 3 {
		h := r.evidence(i+1).holder(r.str(i), r.time(i+2))
		h.ReadAt = r.time(0)
		list = append(list, *h)
	}
	if r.err != nil {
		return nil, r.err
	}
	slices.SortFunc(list, func(a, b Holder) int { return strings.Compare(a.Job, b.Job) })
	return list, nil
}

// Counts returns the number of live leases and of quarantined jobs.
func (s *Redis) Counts(ctx context.Context) (Counts, error) {
	v, err := s.run(ctx, "count", scriptCounts, []string{s.indexKey(), s.quarantinedKey()})
	if err != nil {
		return Counts{}, err
	}
	r := reply{op: "count", v: v}
	c := Counts{InFlight: int(r.int(0)), Quarantined: int(r.int(1))}
	return c, r.err
}

// CheckToken returns nil when token is job's current token and its lease is
// live; see Store.
func (s *Redis) CheckToken(ctx context.Context, job string, token int64) error {
	v, err := s.run(ctx, "check token", scriptCheckToken, s.keys(job), s.ns, job)
	if err != nil {
		return err
	}
	r := reply{op: "check token", v: v}
	current, live := r.int(0), r.int(1) == 1
	if r.err != nil {
		return r.err
	}
	if token == current && live {
		return nil
	}
	return &StaleTokenError{Job: job, Token: token, Current: current, Live: live}
}

// Subscribe starts delivering job's release notifications; it returns once
// Redis confirmed the subscription, so no later release is missed.
func (s *Redis) Subscribe(ctx context.Context, job string) (Subscription, error) {
	ps := s.rdb.Subscribe(ctx, s.channel(job))
	if _, err := ps.Receive(ctx); err != nil {
		ps.Close()
		return nil, s.unavailable("subscribe", err)
	}
	sub := &redisSubscription{ps: ps, released: make(chan struct{}, 1)}
	go sub.forward(ps.Channel())
	return sub, nil
}

// redisSubscription turns a job's pub/sub messages into coalesced wake-ups.
type redisSubscription struct {
	ps       *redis.PubSub
	released chan struct{}
}

// forward runs until the subscription is closed.
func (s *redisSubscription) forward(msgs <-chan *redis.Message) {
	for range msgs {
		select {
		case s.released <- struct{}{}:
		default:
		}
	}
}

// Released receives a value after a release; values coalesce.
func (s *redisSubscription) Released() <-chan struct{} { return s.released }

// Close stops the subscription and closes its connection.
func (s *redisSubscription) Close() error {
	if err := s.ps.Close(); err != nil {
		return fmt.Errorf("close Redis subscription: %w", err)
	}
	return nil
}

// millis is d in whole milliseconds, rounded up so that a positive TTL
// never becomes zero.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// noNUL rejects strings holding NUL, the separator of packed fields. No
// command-line argument, host name or flag value can hold one.
func noNUL(ss ...string) error {
	for _, s := range ss {
		if strings.Contains(s, sep) {
			return fmt.Errorf("leasestore: %q contains a NUL byte, which the Redis store cannot keep", s)
		}
	}
	return nil
}

// evidence is what Go reads of a run's packed evidence (lua/lib.lua lists
// all its fields; the TTLs and threshold only matter to the scripts).
type evidence struct {
	worker  string
	token   int64
	started time.Time
	attempt int64
	host    string
	pid     int
	command []string
}

// parseEvidence decodes packed evidence.
func parseEvidence(s string) (evidence, error) {
	f := strings.Split(s, sep)
	if len(f) < evidenceFields {
		return evidence{}, fmt.Errorf("corrupt evidence: %d fields, want at least %d", len(f), evidenceFields)
	}
	token, err1 := strconv.ParseInt(f[1], 10, 64)
	offset, err2 := strconv.ParseInt(f[2], 36, 64)
	attempt, err3 := strconv.ParseInt(f[5], 10, 64)
	pid, err4 := strconv.Atoi(f[8])
	if err := cmp.Or(err1, err2, err3, err4); err != nil {
		return evidence{}, fmt.Errorf("corrupt evidence: %w", err)
	}
	return evidence{worker: f[0], token: token, started: time.UnixMicro(token - offset), attempt: attempt,
		host: f[7], pid: pid, command: f[evidenceFields:]}, nil
}

// holder describes the evidence's run as a live lease.
func (e *evidence) holder(job string, expiry time.Time) *Holder {
	return &Holder{Job: job, Worker: e.worker, Host: e.host, PID: e.pid, Token: e.token, Attempt: e.attempt,
		Command: e.command, StartedAt: e.started, ExpiresAt: expiry}
}

// crash describes the evidence's run as a crash.
func (e *evidence) crash(job string, staleSince, now time.Time, crashes int, quarantined bool) *Crash {
	return &Crash{Job: job, Holder: e.worker, Host: e.host, PID: e.pid, Token: e.token, Command: e.command,
		StartedAt: e.started, StaleSince: staleSince, DetectedAt: now, Crashes: crashes, Quarantined: quarantined}
}

// eventKinds maps the one-letter kinds of packed events (lua/lib.lua).
var eventKinds = map[string]EventKind{
	"a": EventAcquired, "r": EventReleased, "c": EventCrashed,
	"q": EventQuarantined, "u": EventUnquarantine, "l": EventLeaseLost,
}

// reply decodes a script's array reply. The first decoding error sticks in
// err and later accessors return zero values, so a caller checks err once.
type reply struct {
	op  string
	v   any
	err error
}

func (r *reply) fail(format string, args ...any) {
	if r.err == nil {
		r.err = &UnavailableError{Op: r.op, Err: fmt.Errorf("unexpected reply from Redis: "+format, args...)}
	}
}

func (r *reply) len() int {
	a, _ := r.v.([]any)
	return len(a)
}

func (r *reply) at(i int) any {
	a, ok := r.v.([]any)
	if !ok || i >= len(a) {
		r.fail("no element %d", i)
		return nil
	}
	return a[i]
}

func (r *reply) str(i int) string {
	switch x := r.at(i).(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	default:
		r.fail("element %d is a %T", i, x)
		return ""
	}
}

func (r *reply) int(i int) int64 {
	s := r.str(i)
	if s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		r.fail("element %d is %q, not an integer", i, s)
	}
	return n
}

// time decodes microseconds since the Unix epoch.
func (r *reply) time(i int) time.Time {
	return time.UnixMicro(r.int(i))
}

func (r *reply) evidence(i int) *evidence {
	ev, err := parseEvidence(r.str(i))
	if err != nil {
		r.fail("%v", err)
	}
	return &ev
}

// crash decodes {evidence, stale since, crashes, quarantined} at i.
func (r *reply) crash(job string, i int, now time.Time) *Crash {
	return r.evidence(i).crash(job, r.time(i+1), now, int(r.int(i+2)), r.int(i+3) == 1)
}

// quarantine decodes {since, reason, by, crashes, last holder, last host}
// at i.
func (r *reply) quarantine(job string, i int) Quarantine {
	return Quarantine{Job: job, Since: r.time(i), Reason: r.str(i + 1), By: r.str(i + 2),
		Crashes: int(r.int(i + 3)), LastHolder: r.str(i + 4), LastHost: r.str(i + 5)}
}

// record decodes the HGETALL of a record at i.
func (r *reply) record(i int) record {
	a, ok := r.at(i).([]any)
	if !ok {
		r.fail("element %d is not a record", i)
		return nil
	}
	rec := record{}
	for j := 0; j+1 < len(a); j += 2 {
		k, _ := a[j].(string)
		v, _ := a[j+1].(string)
		rec[k] = v
	}
	rec.check(r)
	return rec
}

// history decodes the packed events at i.
func (r *reply) history(i int) []Event {
	a, ok := r.at(i).([]any)
	if !ok {
		r.fail("element %d is not a history", i)
		return nil
	}
	var events []Event
	for _, x := range a {
		s, _ := x.(string)
		e, err := parseEvent(s)
		if err != nil {
			r.fail("%v", err)
			return nil
		}
		events = append(events, e)
	}
	return events
}

// parseEvent decodes a packed event (lua/lib.lua, event).
func parseEvent(s string) (Event, error) {
	f := strings.SplitN(s, sep, 4)
	if len(f) != 4 || len(f[0]) < 2 || eventKinds[f[0][:1]] == "" {
		return Event{}, fmt.Errorf("corrupt history event %q", s)
	}
	at, err := strconv.ParseInt(f[0][1:], 36, 64)
	if err != nil {
		return Event{}, fmt.Errorf("corrupt history event %q: %w", s, err)
	}
	e := Event{At: time.UnixMicro(at), Kind: eventKinds[f[0][:1]], Worker: f[1], Detail: f[3]}
	if f[2] != "" {
		offset, err := strconv.ParseInt(f[2], 36, 64)
		if err != nil {
			return Event{}, fmt.Errorf("corrupt history event %q: %w", s, err)
		}
		e.Token = at - offset
	}
	return e, nil
}

// record is a job's record hash (field names in lua/lib.lua).
type record map[string]string

// recordInts are the record's numeric fields.
var recordInts = []string{"t", "a", "c", "m", "s", "q", "qc", "oe", "og", "od", "ot", "of"}

// check reports a non-numeric numeric field on r.
func (rec record) check(r *reply) {
	for _, k := range recordInts {
		if _, err := parseOptionalInt(rec[k]); err != nil {
			r.fail("record field %s is %q, not an integer", k, rec[k])
		}
	}
}

func (rec record) int(k string) int64 {
	n, _ := parseOptionalInt(rec[k])
	return n
}

// time decodes microseconds since the Unix epoch; zero when absent.
func (rec record) time(k string) time.Time {
	if rec[k] == "" {
		return time.Time{}
	}
	return time.UnixMicro(rec.int(k))
}

// parseOptionalInt parses a decimal integer; "" is 0.
func parseOptionalInt(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// unavailable wraps a go-redis failure in an *UnavailableError whose message
// names the cause in one line and never holds the password.
func (s *Redis) unavailable(op string, err error) error {
	return &UnavailableError{Op: op, Err: &redisError{msg: scrub(s.explain(err), s.password), err: err}}
}

// explain names the cause of a go-redis failure.
func (s *Redis) explain(err error) string {
	text := err.Error()
	var netErr net.Error
	switch {
	case strings.Contains(text, "WRONGPASS") || strings.Contains(text, "NOAUTH") ||
		strings.Contains(text, "AUTH <password> called without any password") ||
		strings.Contains(text, "Protocol error: unauthenticated"):
		return "Redis refused the credentials"
	case strings.HasPrefix(text, "OOM ") || strings.Contains(text, "OOM command not allowed"):
		return "Redis is out of memory (maxmemory reached)"
	case strings.HasPrefix(text, "READONLY") || strings.Contains(text, "READONLY You can't write"):
		return "connected to a read-only replica"
	case isScriptingRefused(text):
		return "Redis refuses Lua scripts, which leasectl needs"
	case strings.HasPrefix(text, "NOPERM"):
		return "Redis ACL denies a command leasectl needs: " + firstLine(text)
	case strings.HasPrefix(text, "LOADING"):
		return "Redis is still loading its data set"
	case strings.HasPrefix(text, "BUSY"):
		return "Redis is busy running a slow script"
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Sprintf("no answer from Redis at %s before the deadline", s.addr)
	case errors.Is(err, context.Canceled):
		return "cancelled while talking to Redis"
	case errors.Is(err, redis.ErrClosed):
		return "the Redis client is closed"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Sprintf("Redis at %s closed the connection", s.addr)
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		if opErr.Op == "dial" {
			return fmt.Sprintf("cannot connect to Redis at %s: %v", s.addr, opErr.Err)
		}
		return fmt.Sprintf("lost the connection to Redis at %s: %v", s.addr, opErr.Err)
	}
	return fmt.Sprintf("Redis at %s: %s", s.addr, firstLine(text))
}

// isScriptingRefused recognises a server without EVAL/EVALSHA (renamed
// away with rename-command) or whose ACL forbids them.
func isScriptingRefused(text string) bool {
	lower := strings.ToLower(text)
	mentionsEval := strings.Contains(lower, "'eval") || strings.Contains(lower, "`eval") ||
		strings.Contains(lower, "'evalsha") || strings.Contains(lower, "`evalsha") || strings.Contains(lower, "script")
	return mentionsEval && (strings.Contains(lower, "unknown command") || strings.HasPrefix(text, "NOPERM"))
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// scrub replaces the password in msg, should the server or a library ever
// echo it.
func scrub(msg, password string) string {
	if password == "" {
		return msg
	}
	return strings.ReplaceAll(msg, password, "xxxxx")
}

// redisError is a go-redis failure explained in one line; the original
// error stays reachable for errors.Is and errors.As.
type redisError struct {
	msg string
	err error
}

func (e *redisError) Error() string { return e.msg }
func (e *redisError) Unwrap() error { return e.err }
