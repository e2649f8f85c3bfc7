package fence

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasectl/leasectl/clock"
	"github.com/leasectl/leasectl/leasestore"
)

// Pattern is how a Checker decides whether a token may be used; the package
// documentation states what each one guarantees.
type Pattern int

// The three patterns, from the most consistent to the fastest.
const (
	// Authoritative asks the store on every check that could accept.
	Authoritative Pattern = iota
	// BoundedStaleness accepts the token the store confirmed less than
	// MaxStaleness ago from memory, and asks the store about any other.
	BoundedStaleness
	// WriteThrough follows the store's token feed and answers from memory
	// while the feed's heartbeat is recent.
	WriteThrough
)

// String names the pattern as the documentation does.
func (p Pattern) String() string {
	switch p {
	case Authoritative:
		return "authoritative"
	case BoundedStaleness:
		return "bounded-staleness"
	case WriteThrough:
		return "write-through"
	}
	return fmt.Sprintf("Pattern(%d)", int(p))
}

// Defaults of Options.
const (
	// DefaultMaxStaleness is how long BoundedStaleness trusts a token the
	// store confirmed. Longer saves store round trips for a busy writer but
	// lets a run that lost its lease write for that much longer, if no newer
	// token reached the checker meanwhile; the seed pattern's 5 to 10
	// seconds, at the safe end.
	DefaultMaxStaleness = 5 * time.Second
	// DefaultHeartbeat is how often WriteThrough runs the feed's heartbeat.
	DefaultHeartbeat = time.Second
	// DefaultLagBeats is MaxLag's default in heartbeats: three missed
	// heartbeats and the feed is no longer trusted. Fewer falls back to the
	// store on a mere hiccup; more trusts a broken feed for longer.
	DefaultLagBeats = 3
	// DefaultMaxJobs is how many jobs a Checker remembers. Each costs a few
	// hundred bytes, and with WriteThrough a watch; a job forgotten to make
	// room loses its high-water mark and is checked with the store again.
	DefaultMaxJobs = 10_000
)

// Store is what a Checker needs of a store: leasestore.Store has it, and
// WriteThrough also needs a leasestore.TokenFeed (every store of
// leasectl's has one, and so does a registry's remote store, httpstore, in
// front of any of them).
type Store interface {
	// CheckToken returns nil when token is job's current token and its run
	// is live, and a *leasestore.StaleTokenError otherwise.
	CheckToken(ctx context.Context, job string, token int64) error
}

// Options configure a Checker. The zero value is the authoritative pattern.
type Options struct {
	// Pattern is how the Checker decides.
	Pattern Pattern
	// MaxStaleness (BoundedStaleness only) is how long after the store
	// confirmed a token the Checker accepts it from memory. 0 means
	// DefaultMaxStaleness.
	MaxStaleness time.Duration
	// Heartbeat (WriteThrough only) is how often the feed's heartbeat runs.
	// 0 means DefaultHeartbeat.
	Heartbeat time.Duration
	// MaxLag (WriteThrough only) is how long after the start of the last
	// successful heartbeat the feed is trusted; longer than Heartbeat. 0
	// means DefaultLagBeats heartbeats.
	MaxLag time.Duration
	// MaxJobs bounds the jobs remembered; the least recently checked are
	// forgotten to make room. 0 means DefaultMaxJobs.
	MaxJobs int
	// Clock is the time source; nil means the system clock. Tests pass a
	// fake one (package fakeclock) to move time instead of waiting.
	Clock clock.Clock
}

// Checker checks the fencing tokens of one store's jobs. Every method is
// safe for concurrent use. Close it when done: with WriteThrough it holds
// the feed's watches and a heartbeat goroutine.
type Checker struct {
	store     Store
	feed      leasestore.TokenFeed // WriteThrough only
	pattern   Pattern
	maxStale  time.Duration
	heartbeat time.Duration
	maxLag    time.Duration
	maxJobs   int
	clock     clock.Clock
	epoch     time.Time // times kept in atomics are nanoseconds since it

	// jobs maps a job ID to its *entry; checks read it without a lock. mu
	// serialises what changes the set: a new job, an eviction, Close.
	jobs   sync.Map
	njobs  atomic.Int64
	mu     sync.Mutex
	closed atomic.Bool

	// syncedAt is when the last successful heartbeat started (ns since
	// epoch); math.MinInt64 before the first.
	syncedAt atomic.Int64
	cancel   context.CancelFunc
	done     chan struct{} // closed when the heartbeat goroutine ends

	counts [countStripes]counters
}

// entry is what a Checker knows of one job. Checks read a copy of its
// state (memo) without a lock, so that checks of one job from many
// goroutines do not queue; everything that changes it holds mu and
// publishes a new copy.
type entry struct {
	job      string
	lastUsed atomic.Int64 // ns since epoch of a recent check, to lastUsedGrain
	memo     atomic.Pointer[memo]
	watched  atomic.Bool // WriteThrough: the watch runs

	mu    sync.Mutex
	state memo
	// deniedAt is when the last request the store refused was sent: a
	// confirmation sent earlier and arriving later is ignored.
	deniedAt time.Time

	// WriteThrough: the job's watch.
	watch    leasestore.TokenWatch
	watching bool      // a WatchTokens call is under way
	triedAt  time.Time // when the last WatchTokens call started

	// Admit: writes admitted and not done yet, all with activeToken;
	// drained is closed when the last is done.
	active      int
	activeToken int64
	drained     chan struct{}

	evicted bool // forgotten to make room
}

// memo is what the checks of a job decide on.
type memo struct {
	// high is the highest token learned for the job: accepted, reported by
	// the store or by the feed. No token below it is ever accepted.
	high     int64
	highLive bool

	// BoundedStaleness: the token the store last confirmed, and when the
	// request that confirmed it was sent.
	confirmed   int64
	confirmedAt time.Time

	// WriteThrough: what the feed reported; feedOK once a read came since
	// the watch started or was lost.
	feedOK    bool
	feedToken int64
	feedLive  bool
}

// lastUsedGrain is how fresh an entry's lastUsed is kept: eviction needs no
// finer order, and most checks then only read it.
const lastUsedGrain = time.Millisecond

// newEntry returns the entry of a job checked for the first time at now.
func (c *Checker) newEntry(job string, now time.Time) *entry {
	e := &entry{job: job, drained: make(chan struct{})}
	e.lastUsed.Store(c.since(now))
	e.memo.Store(&memo{})
	return e
}

// publish makes the current state what checks read; e.mu is held.
func (e *entry) publish() {
	m := e.state
	e.memo.Store(&m)
}

// New returns a Checker of the tokens of store's jobs. It validates opts
// before anything else; with WriteThrough, store must also be a
// leasestore.TokenFeed, and the Checker starts the feed's heartbeat at once.
func New(store Store, opts Options) (*Checker, error) {
	if store == nil {
		return nil, errors.New("fence: no store")
	}
	c := &Checker{
		store: store, pattern: opts.Pattern, maxStale: opts.MaxStaleness, heartbeat: opts.Heartbeat,
		maxLag: opts.MaxLag, maxJobs: opts.MaxJobs, clock: opts.Clock,
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	if c.clock == nil {
		c.clock = clock.Real{}
	}
	c.epoch = c.clock.Now()
	c.syncedAt.Store(math.MinInt64)
	if c.pattern == WriteThrough {
		feed, ok := store.(leasestore.TokenFeed)
		if !ok {
			return nil, fmt.Errorf("fence: the write-through pattern needs a store with a token feed (leasestore.TokenFeed); %T has none", store)
		}
		c.feed = feed
		ctx, cancel := context.WithCancel(context.Background())
		c.cancel, c.done = cancel, make(chan struct{})
		go c.beat(ctx)
	}
	return c, nil
}

// validate checks the options and fills in the defaults.
func (c *Checker) validate() error {
	switch {
	case c.pattern < Authoritative || c.pattern > WriteThrough:
		return fmt.Errorf("fence: unknown pattern %d", int(c.pattern))
	case c.maxStale < 0 || c.heartbeat < 0 || c.maxLag < 0 || c.maxJobs < 0:
		return errors.New("fence: MaxStaleness, Heartbeat, MaxLag and MaxJobs must not be negative")
	case c.maxStale != 0 && c.pattern != BoundedStaleness:
		return fmt.Errorf("fence: MaxStaleness applies to the bounded-staleness pattern, not %s", c.pattern)
	case (c.heartbeat != 0 || c.maxLag != 0) && c.pattern != WriteThrough:
		return fmt.Errorf("fence: Heartbeat and MaxLag apply to the write-through pattern, not %s", c.pattern)
	}
	if c.maxStale == 0 {
		c.maxStale = DefaultMaxStaleness
	}
	if c.heartbeat == 0 {
		c.heartbeat = DefaultHeartbeat
	}
	if c.maxLag == 0 {
		c.maxLag = DefaultLagBeats * c.heartbeat
	}
	if c.maxLag <= c.heartbeat {
		return fmt.Errorf("fence: MaxLag (%s) must be longer than Heartbeat (%s): a heartbeat on time must keep the feed trusted", c.maxLag, c.heartbeat)
	}
	if c.maxJobs == 0 {
		c.maxJobs = DefaultMaxJobs
	}
	return nil
}

// Check returns nil when token may be used for a write to job: no higher
// token is known for the job and, as far as the pattern can tell, token's
// run is live. It returns a *StaleError (errors.Is ErrStale) when the token
// may not be used, and another error when the checker could not decide
// (ErrInvalid, ErrClosed, or the store's error, which matches
// leasestore.ErrUnavailable): the caller must then refuse the write, or
// retry. ctx bounds the store's answer, when one is needed.
//
// Check does not hold anything for the write that follows; Admit does.
func (c *Checker) Check(ctx context.Context, job string, token int64) error {
	_, err := c.check(ctx, job, token)
	return err
}

// Admit checks token like Check and, when it may be used, admits one write
// with it: until done is called, a newer token's Admit for the same job
// waits (bounded by its ctx), and no older token is admitted afterwards. So
// no write with an older token runs alongside or after one with a newer
// token, within this process; the check and the write are one step. done
// must be called once the write is finished, also when it failed; calling it
// again does nothing.
func (c *Checker) Admit(ctx context.Context, job string, token int64) (done func(), err error) {
	e, err := c.check(ctx, job, token)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	for e.evicted {
		// Forgotten to make room between the check and now: admit on the
		// job's new entry, which later checks will find.
		e.mu.Unlock()
		c.count().accepted.Add(^uint64(0))
		if e, err = c.check(ctx, job, token); err != nil {
			return nil, err
		}
		e.mu.Lock()
	}
	for e.active > 0 && e.activeToken < token {
		drained, older := e.drained, e.activeToken
		e.mu.Unlock()
		select {
		case <-drained:
		case <-ctx.Done():
			// The check counted as accepted; the admission failed.
			n := c.count()
			n.accepted.Add(^uint64(0))
			n.failed.Add(1)
			return nil, fmt.Errorf("fence: waiting for the writes with token %d of job %q to finish: %w", older, job, ctx.Err())
		}
		e.mu.Lock()
	}
	if token < e.state.high {
		err := &StaleError{Job: job, Token: token, Newest: e.state.high, Live: e.state.highLive}
		e.mu.Unlock()
		n := c.count()
		n.accepted.Add(^uint64(0))
		n.stale.Add(1)
		return nil, err
	}
	e.active++
	e.activeToken = token
	e.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.active--
			if e.active == 0 {
				close(e.drained)
				e.drained = make(chan struct{})
			}
		})
	}, nil
}

// check decides about token and returns job's entry.
func (c *Checker) check(ctx context.Context, job string, token int64) (*entry, error) {
	if err := leasestore.ValidateJobID(job); err != nil {
		c.count().failed.Add(1)
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if token <= 0 {
		c.count().failed.Add(1)
		return nil, fmt.Errorf("%w: fencing token %d: tokens are positive", ErrInvalid, token)
	}
	now := c.clock.Now()
	e, err := c.entry(ctx, job, now)
	if err != nil {
		c.count().failed.Add(1)
		return nil, err
	}
	if at := c.since(now); at-e.lastUsed.Load() >= int64(lastUsedGrain) {
		e.lastUsed.Store(at)
	}
	decided, err := c.fromMemory(e.memo.Load(), job, token, now)
	if !decided {
		err = c.ask(ctx, e, token)
	}
	var se *StaleError
	n := c.count()
	switch {
	case err == nil:
		n.accepted.Add(1)
	case errors.As(err, &se):
		n.stale.Add(1)
	default:
		n.failed.Add(1)
	}
	return e, err
}

// fromMemory answers from m, what the checker knows of job, when it may.
func (c *Checker) fromMemory(m *memo, job string, token int64, now time.Time) (decided bool, err error) {
	if token < m.high || token == m.high && !m.highLive {
		// Below the mark; or the mark's own run has ended, which no run
		// comes back from (a renewal after the liveness expired is refused).
		return true, &StaleError{Job: job, Token: token, Newest: m.high, Live: m.highLive}
	}
	switch c.pattern {
	case BoundedStaleness:
		if token == m.confirmed && now.Sub(m.confirmedAt) < c.maxStale {
			return true, nil
		}
	case WriteThrough:
		if m.feedOK && token == m.feedToken && c.since(now)-c.syncedAt.Load() < int64(c.maxLag) {
			if m.feedLive {
				return true, nil
			}
			return true, &StaleError{Job: job, Token: token, Newest: m.high, Live: m.high > token && m.highLive}
		}
	}
	return false, nil
}

// ask asks the store about token and learns from the answer.
func (c *Checker) ask(ctx context.Context, e *entry, token int64) error {
	sent := c.clock.Now()
	c.count().storeChecks.Add(1)
	err := c.store.CheckToken(ctx, e.job, token)
	var se *leasestore.StaleTokenError
	e.mu.Lock()
	defer e.mu.Unlock()
	st := &e.state
	switch {
	case err == nil:
		if token < st.high {
			// A newer token was learned while the store answered.
			return &StaleError{Job: e.job, Token: token, Newest: st.high, Live: st.highLive}
		}
		st.learn(token, true)
		if sent.After(e.deniedAt) && (token > st.confirmed || sent.After(st.confirmedAt)) {
			st.confirmed, st.confirmedAt = token, sent
		}
		e.publish()
		return nil
	case errors.As(err, &se):
		st.learn(se.Current, se.Live)
		if sent.After(e.deniedAt) {
			e.deniedAt = sent
		}
		if st.confirmed == token {
			st.confirmedAt = time.Time{}
		}
		e.publish()
		return &StaleError{Job: e.job, Token: token, Newest: st.high, Live: st.highLive, FromStore: true}
	default:
		return fmt.Errorf("fence: check token %d of job %q: %w", token, e.job, err)
	}
}

// learn raises the high-water mark to token, a token the store granted.
func (m *memo) learn(token int64, live bool) {
	switch {
	case token > m.high:
		m.high, m.highLive = token, live
	case token == m.high && !live:
		m.highLive = false
	}
}

// since is t in nanoseconds since the checker's epoch.
func (c *Checker) since(t time.Time) int64 { return int64(t.Sub(c.epoch)) }

// Close stops the heartbeat and the watches; later checks fail with
// ErrClosed. It does not close the store.
func (c *Checker) Close() error {
	c.mu.Lock()
	if c.closed.Swap(true) {
		c.mu.Unlock()
		return nil
	}
	var entries []*entry
	c.jobs.Range(func(job, e any) bool {
		entries = append(entries, e.(*entry))
		c.jobs.Delete(job)
		return true
	})
	c.njobs.Store(0)
	c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
	for _, e := range entries {
		closeWatches(e.takeWatch())
	}
	return nil
}
