package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/failover"
)

const (
	// poolSize bounds the connections one client opens. A supervisor makes
	// one call at a time (plus a subscription, which has its own
	// connection); the reaper and the inspection commands a few.
	poolSize = 4

	// scanBatch is how many expired index entries of one shard one Scan
	// script handles. Larger batches mean fewer round trips but hold Redis
	// (and every other client's renewals) for longer: 1,000 crashes take a
	// few milliseconds.
	scanBatch = 1000

	// sep separates packed fields; see lua/lib.lua.
	sep = "\x00"

	// evidenceFields is how many fields precede the command arguments in
	// packed evidence.
	evidenceFields = 9

	// releaseUndoTimeout bounds the release of a grant that did not reach
	// min_replicas: short, since the caller is already past its answer.
	releaseUndoTimeout = time.Second
)

// Store is the leasestore.Driver kept in Redis, shared by many hosts. It
// works through any go-redis UniversalClient: a single node, a Sentinel
// failover client or a Cluster client, since every script touches the keys
// of one slot.
type Store struct {
	// book keeps the notices in the notices hash (notices.go): its
	// methods are the Store's.
	*book
	rdb     redis.UniversalClient
	ns      string
	addr    string   // for error messages; empty when unknown
	url     string   // the URL opened, redacted, for errors about it; empty when unknown
	db      int      // the database number, for errors about it
	tls     bool     // the connections use TLS
	secrets []string // the URL's passwords, only to scrub them from error messages
	// minReplicas is how many replicas must acknowledge every grant and
	// renewal (replicas.go); 0: none, Redis's asynchronous default.
	minReplicas int
	// nodes are a cluster client's node clients, where Open made it; nil
	// otherwise (copies.go).
	nodes *clusterNodes
	// copies follows the runs whose acquire went out more than once.
	copies *failover.Copies

	// The token feed (tokenfeed.go), started by the portable Store's first
	// WatchTokens.
	feedMu sync.Mutex
	feed   *tokenFeed
}

var _ leasestore.Driver = (*Store)(nil)

// New returns a Store on rdb keeping its keys under namespace, which must
// be valid (leasestore.ValidateNamespace). rdb should not retry commands on
// its own (MaxRetries -1): a retried acquire or release could act twice.
// Close closes rdb.
func New(rdb redis.UniversalClient, namespace string) *Store {
	silenceLogs.Do(func() { redis.SetLogger(discardLogger{}) })
	s := &Store{rdb: rdb, ns: namespace}
	s.book = &book{Shelf: (*noticeShelf)(s)}
	s.copies = failover.NewCopies(s, "gave up on the copies of its acquire sent while the primary was silent")
	return s
}

// silenceLogs stops go-redis from printing its own diagnostics on stderr,
// which leasectl shares with the child and its structured log: every
// failure it would print also comes back as an error.
var silenceLogs sync.Once

// discardLogger is a go-redis logger that drops everything.
type discardLogger struct{}

// Printf drops the message.
func (discardLogger) Printf(context.Context, string, ...any) {}

// Close stops the token feed, if any, and closes the client's connections.
func (s *Store) Close() error {
	s.closeFeed()
	if s.nodes != nil {
		s.nodes.close()
	}
	if err := s.rdb.Close(); err != nil {
		return fmt.Errorf("close Redis client: %w", err)
	}
	return nil
}

// jobPrefix is the prefix of job's shard, the first argument of every
// per-job script.
func (s *Store) jobPrefix(job string) string { return s.shardPrefix(shardOf(job)) }

// run runs script and returns its reply, or an *UnavailableError for op.
func (s *Store) run(ctx context.Context, op string, script func() *redis.Script, keys []string, args ...any) (any, error) {
	v, err := script().Run(ctx, s.rdb, keys, args...).Result()
	if err != nil {
		return nil, s.unavailable(op, err)
	}
	return v, nil
}

// runShards runs a per-shard script on each shard in one pipeline (on a
// cluster, one per primary) with the shard's prefix and args, and returns
// the replies in the order of the shards. A shard whose server lost its
// script cache is run again on its own, which loads the script.
func (s *Store) runShards(ctx context.Context, op string, script func() *redis.Script, shardList []int, args ...any) ([]*reply, error) {
	sc := script()
	cmds := make([]*redis.Cmd, len(shardList))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, shard := range shardList {
			cmds[i] = sc.EvalSha(ctx, p, s.shardKeys(shard), append([]any{s.shardPrefix(shard)}, args...)...)
		}
		return nil
	})
	if err != nil && !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return nil, s.unavailable(op, err)
	}
	replies := make([]*reply, len(shardList))
	for i, cmd := range cmds {
		v, err := cmd.Result()
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			v, err = s.run(ctx, op, script, s.shardKeys(shardList[i]), append([]any{s.shardPrefix(shardList[i])}, args...)...)
		} else if err != nil {
			err = s.unavailable(op, err)
		}
		if err != nil {
			return nil, err
		}
		replies[i] = &reply{op: op, v: v}
	}
	return replies, nil
}

// allShards lists every shard number.
func allShards() []int {
	list := make([]int, shards)
	for i := range list {
		list[i] = i
	}
	return list
}

// Acquire grants the lease on req.Job; see Store.
func (s *Store) Acquire(ctx context.Context, req leasestore.AcquireRequest) (*leasestore.Lease, error) {
	if err := noNUL(append([]string{req.Holder, req.Host, req.Region}, req.Command...)...); err != nil {
		return nil, err
	}
	var deadline int64
	if !req.Deadline.IsZero() {
		deadline = max(req.Deadline.UnixMicro(), 1) // 0 means none
	}
	every, grace := expectArgs(req.Expect)
	var command strings.Builder
	for _, a := range req.Command {
		command.WriteString(sep)
		command.WriteString(a)
	}
	v, copies, err := s.runReplicated(ctx, "acquire", scriptAcquire, s.jobKeys(req.Job), []any{
		s.jobPrefix(req.Job), req.Job, req.Holder, millis(req.TTL), millis(req.EvidenceTTL), req.MaxCrashes,
		req.MinInterval.Microseconds(), req.Host, req.PID, command.String(), req.Region, deadline, every, grace,
		max(req.Slots, 1), waitArg(req.Wait)})
	l, err := s.acquired(req, v, err)
	if copies > 1 {
		s.copies.Acquired(ctx, req, err)
	}
	return l, err
}

// waitArg is AcquireRequest.Wait as the acquire script takes it.
func waitArg(wait bool) string {
	if wait {
		return "1"
	}
	return "0"
}

// acquired turns the acquire script's reply v (or err) into Acquire's
// answer.
func (s *Store) acquired(req leasestore.AcquireRequest, v any, err error) (*leasestore.Lease, error) {
	r := &reply{op: "acquire", v: v}
	if err != nil {
		if v != nil && r.str(0) == "ok" {
			s.undoUnreplicated(req, r.int(2), int(r.int(8)))
		}
		return nil, err
	}
	kind, now := r.str(0), r.time(1)
	switch kind {
	case "abandoned":
		return nil, fmt.Errorf("acquire job %q: worker %s gave up on it: %w", req.Job, req.Holder, leasestore.ErrLeaseLost)
	case "held":
		held := &leasestore.HeldError{Job: req.Job, Slots: int(r.int(4)), Position: int(r.int(5)), Waiting: int(r.int(6))}
		if r.str(2) != "" {
			ev := r.evidence(2)
			held.Holder, held.Host, held.PID, held.Token = ev.worker, ev.host, ev.pid, ev.token
			held.Since, held.ExpiresIn = ev.started, r.time(3).Sub(now)
		}
		if r.err != nil {
			return nil, r.err
		}
		return nil, held
	case "slots":
		slots := int(r.int(2))
		if r.err != nil {
			return nil, r.err
		}
		return nil, &leasestore.SlotsError{Job: req.Job, Slots: slots, Requested: max(req.Slots, 1)}
	case "quarantined":
		q := r.quarantine(req.Job, 2)
		if r.err != nil {
			return nil, r.err
		}
		return nil, &leasestore.QuarantinedError{Quarantine: q}
	case "region":
		region := r.str(2)
		if r.err != nil {
			return nil, r.err
		}
		return nil, &leasestore.RegionError{Job: req.Job, Region: region, Requested: req.Region}
	case "deadline":
		if r.err != nil {
			return nil, r.err
		}
		return nil, &leasestore.DeadlineError{Job: req.Job, Deadline: req.Deadline, Now: now}
	case "toosoon":
		last := r.time(2)
		if r.err != nil {
			return nil, r.err
		}
		return nil, &leasestore.TooSoonError{Job: req.Job, LastSuccess: last, MinInterval: req.MinInterval, Age: now.Sub(last)}
	case "ok":
		l := &leasestore.Lease{Job: req.Job, Holder: req.Holder, Token: r.int(2), Attempt: r.int(3), Slot: int(r.int(8)),
			TTL: req.TTL, GrantedAt: now}
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

// undoUnreplicated releases, as not started, a grant that did not reach
// min_replicas replicas: nobody will run it, and left alone it would hold
// the job for a TTL and then count as a crash. Best effort, bounded by
// releaseUndoTimeout: if it fails too, the lease expires.
func (s *Store) undoUnreplicated(req leasestore.AcquireRequest, token int64, slot int) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseUndoTimeout)
	defer cancel()
	l := &leasestore.Lease{Job: req.Job, Holder: req.Holder, Token: token, Slot: slot, TTL: req.TTL}
	_ = s.Release(ctx, l, leasestore.Outcome{Result: leasestore.ResultNotStarted, ExitCode: -1,
		Reason: fmt.Sprintf("the grant did not reach min_replicas=%d replica(s)", s.minReplicas)})
}

// Renew extends l's liveness and its evidence; see Store.
func (s *Store) Renew(ctx context.Context, l *leasestore.Lease) error {
	v, _, err := s.runReplicated(ctx, "renew", scriptRenew, s.jobKeys(l.Job),
		[]any{s.jobPrefix(l.Job), l.Job, l.Holder, l.Token, millis(l.TTL), l.RTT.Microseconds(), l.Slot})
	if err != nil {
		return err
	}
	r := &reply{op: "renew", v: v}
	if r.int(0) != 1 {
		return cmp.Or(r.err, leasestore.ErrLeaseLost)
	}
	if r.len() == 4 {
		l.Stop = &leasestore.StopRequest{By: r.str(1), Reason: r.str(2), At: r.time(3)}
	}
	return r.err
}

// Release ends l with outcome out; see Store.
func (s *Store) Release(ctx context.Context, l *leasestore.Lease, out leasestore.Outcome) error {
	if err := noNUL(l.Holder, out.Reason); err != nil {
		return err
	}
	v, err := s.run(ctx, "release", scriptRelease, s.jobKeys(l.Job),
		s.jobPrefix(l.Job), l.Job, l.Token, l.Holder, string(out.Result), out.ExitCode, out.Signal,
		int64(out.Duration), out.Reason, out.Detail(), l.Slot)
	if err != nil {
		return err
	}
	s.copies.Released(ctx, l)
	if v != int64(1) {
		return leasestore.ErrLeaseLost
	}
	return nil
}

// RecordLate records the outcome of a run that did not reach the store in
// time, and undoes what its absence did; see Store.
func (s *Store) RecordLate(ctx context.Context, late leasestore.LateOutcome) (leasestore.Correction, error) {
	if err := noNUL(late.Holder, late.Reason); err != nil {
		return leasestore.Correction{}, err
	}
	out := late.Outcome
	v, err := s.run(ctx, "record late outcome", scriptRecordLate, s.jobKeys(late.Job),
		s.jobPrefix(late.Job), late.Job, late.Holder, late.Token, string(out.Result), out.ExitCode, out.Signal,
		int64(out.Duration), out.Reason, out.Detail())
	if err != nil {
		return leasestore.Correction{}, err
	}
	r := &reply{op: "record late outcome", v: v}
	c := leasestore.Correction{Released: r.int(0) == 1, CrashWithdrawn: r.int(1) == 1, QuarantineLifted: r.int(2) == 1, Crashes: int(r.int(3))}
	return c, r.err
}

// Scan counts the crashes of runs whose liveness expired; see Store. Each
// shard's batch of up to scanBatch expired entries is one atomic script;
// the shards' scripts go out together, and a shard that filled its batch
// is scanned again. On an error it also returns the crashes counted before.
func (s *Store) Scan(ctx context.Context) ([]leasestore.Crash, error) {
	var crashes []leasestore.Crash
	pending := allShards()
	for len(pending) > 0 {
		replies, err := s.runShards(ctx, "scan", scriptScan, pending, scanBatch)
		if err != nil {
			return crashes, err
		}
		var again []int
		for i, r := range replies {
			now, examined := r.time(0), r.int(1)
			for j := 2; j+4 < r.len() && r.err == nil; j += 5 {
				crashes = append(crashes, *r.crash(r.str(j), j+1, now))
			}
			if r.err != nil {
				return crashes, r.err
			}
			if examined >= scanBatch {
				again = append(again, pending[i])
			}
		}
		pending = again
	}
	return crashes, nil
}

// Quarantine puts job in quarantine by an operator's decision; see Store.
func (s *Store) Quarantine(ctx context.Context, job string, note leasestore.Note) error {
	if err := noNUL(note.By, note.Reason); err != nil {
		return err
	}
	_, err := s.run(ctx, "quarantine", scriptQuarantine, s.jobKeys(job), s.jobPrefix(job), job, note.By, note.Reason)
	return err
}

// ReleaseQuarantine lets job run again; see Store.
func (s *Store) ReleaseQuarantine(ctx context.Context, job string, note leasestore.Note) error {
	if err := noNUL(note.By, note.Reason); err != nil {
		return err
	}
	v, err := s.run(ctx, "release quarantine", scriptUnquarantine, s.jobKeys(job), s.jobPrefix(job), job, note.By, note.Reason)
	if err != nil {
		return err
	}
	if v != int64(1) {
		return leasestore.ErrNotQuarantined
	}
	return nil
}

// Stop asks job's running child to stop; see Store.
func (s *Store) Stop(ctx context.Context, job string, note leasestore.Note) error {
	if err := noNUL(note.By, note.Reason); err != nil {
		return err
	}
	v, err := s.run(ctx, "stop", scriptStop, s.jobKeys(job), s.jobPrefix(job), job, note.By, note.Reason)
	if err != nil {
		return err
	}
	if v == int64(0) {
		return fmt.Errorf("stop job %q: %w", job, leasestore.ErrNotRunning)
	}
	return nil
}

// Jobs lists the known jobs of every shard whose IDs start with prefix,
// ordered, at most limit of them; see Store. Each shard gives at most limit,
// in order: the first limit of all of them are among those.
func (s *Store) Jobs(ctx context.Context, prefix string, limit int) ([]string, error) {
	replies, err := s.runShards(ctx, "list jobs", scriptJobs, allShards(), prefix, limit)
	if err != nil {
		return nil, err
	}
	var jobs []string
	for _, r := range replies {
		for i := range r.len() {
			jobs = append(jobs, r.str(i))
		}
		if r.err != nil {
			return nil, r.err
		}
	}
	return leasestore.SelectJobs(jobs, prefix, limit), nil
}

// Quarantined lists the quarantined jobs of every shard, ordered by job.
func (s *Store) Quarantined(ctx context.Context) ([]leasestore.Quarantine, error) {
	replies, err := s.runShards(ctx, "list quarantined", scriptQuarantined, allShards())
	if err != nil {
		return nil, err
	}
	var list []leasestore.Quarantine
	for _, r := range replies {
		for i := 0; i+6 < r.len() && r.err == nil; i += 7 {
			list = append(list, r.quarantine(r.str(i), i+1))
		}
		if r.err != nil {
			return nil, r.err
		}
	}
	slices.SortFunc(list, func(a, b leasestore.Quarantine) int { return strings.Compare(a.Job, b.Job) })
	return list, nil
}

// Subscribe starts delivering job's notifications to waiter; it returns
// once Redis confirmed the subscription, so no later one is missed. A
// waiter listens on a channel of its own, which the scripts publish on
// only when its turn may have come (lua/runs.lua, wake_waiters): a release
// does not wake the waiters behind it. With waiter "", the job's channel.
// What is published while its connection is down is lost: once go-redis
// has subscribed again, the waiter is woken once (forward).
func (s *Store) Subscribe(ctx context.Context, job, waiter string) (leasestore.Subscription, error) {
	if err := noNUL(waiter); err != nil {
		return nil, err
	}
	channel := s.channel(job)
	if waiter != "" {
		channel = s.waiterChannel(job, waiter)
	}
	ps := s.rdb.Subscribe(ctx, channel)
	if _, err := ps.Receive(ctx); err != nil {
		ps.Close()
		return nil, s.unavailable("subscribe", err)
	}
	sub := &redisSubscription{ps: ps, released: make(chan struct{}, 1)}
	go sub.forward(ps.ChannelWithSubscriptions())
	return sub, nil
}

// redisSubscription turns a job's pub/sub messages into coalesced wake-ups.
type redisSubscription struct {
	ps       *redis.PubSub
	released chan struct{}
}

// forward runs until the subscription is closed. Grants ('g' and the token)
// share the channel for token feeds and wake nobody: a new holder is no
// reason to try again. Redis confirming the subscription again (go-redis
// subscribed anew after a lost connection; what was published meanwhile
// is lost) wakes the waiter, which looks for itself, as on the other
// stores; the first confirmation is Subscribe's.
func (s *redisSubscription) forward(msgs <-chan any) {
	for msg := range msgs {
		switch m := msg.(type) {
		case *redis.Message:
			if strings.HasPrefix(m.Payload, grantPrefix) {
				continue
			}
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
		default:
			continue
		}
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
