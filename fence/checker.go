package fence

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
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

// Store is what a Checker needs of a store: the portable
// *leasestore.Store (leasestore.Open, or leasestore.New over a driver)
// has it, and is also the leasestore.TokenFeed that WriteThrough needs,
// whatever the store behind it (a registry's too). A store's bare
// leasestore.Driver is refused: it has no feed, and skips the portable
// Store's checks of what it is asked and its refusal after Close.
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

	// Admit: the writes admitted and not done yet, per slot (index 0 also
	// for the checks that name no slot); made on a slot's first Admit.
	admits []*admission

	evicted bool // forgotten to make room
}

// memo is what the checks of a job decide on.
type memo struct {
	// job is the job's mark: its high is the highest token learned for the
	// job, accepted, reported by the store or by the feed. Until the job is
	// checked with a slot it is the only mark, and no token below it is
	// ever accepted.
	job mark
	// slots are the marks per slot once the job is checked with a slot
	// (CheckSlot, AdmitSlot), nil before: each is raised only by tokens
	// accepted in its slot, and job then only tells the job's newest token.
	slots []mark

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
	e := &entry{job: job}
	e.lastUsed.Store(c.since(now))
	e.memo.Store(&memo{})
	return e
}

// publish makes the current state what checks read; e.mu is held.
func (e *entry) publish() {
	m := e.state
	m.slots = slices.Clone(m.slots)
	e.memo.Store(&m)
}

// New returns a Checker of the tokens of store's jobs. It validates opts
// before anything else; it refuses a bare leasestore.Driver; with
// WriteThrough, store must also be a leasestore.TokenFeed, and the Checker
// starts the feed's heartbeat at once.
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
	if _, bare := store.(leasestore.Driver); bare {
		return nil, fmt.Errorf("fence: %T is a store's driver, without the portable Store's checks and token feed: wrap it with leasestore.New or use leasestore.Open", store)
	}
	if c.pattern == WriteThrough {
		feed, ok := store.(leasestore.TokenFeed)
		if !ok {
			return nil, fmt.Errorf("fence: the write-through pattern needs a store with a token feed (leasestore.TokenFeed); %T has none: wrap it with leasestore.New or use leasestore.Open", store)
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
// It checks in slot 0 and, for a job never checked with a slot, keeps one
// mark for the job: with several slots, see CheckSlot.
func (c *Checker) Check(ctx context.Context, job string, token int64) error {
	_, err := c.check(ctx, job, noSlot, token)
	return err
}

// CheckSlot is Check for a token of the given slot of a job of several
// slots (`run --slots`, LEASECTL_SLOT): the job then keeps a mark per slot,
// and a token is refused when it is below the highest accepted in its slot,
// not in the job. A newer grant of a slot ends the older tokens of that
// slot once it reaches the checker, and leaves the other slots' alone.
// The checker takes slot on trust (docs/fencing.md, "Several slots").
func (c *Checker) CheckSlot(ctx context.Context, job string, slot int, token int64) error {
	if err := c.validSlot(slot); err != nil {
		return err
	}
	_, err := c.check(ctx, job, slot, token)
	return err
}

// Admit checks token like Check and, when it may be used, admits one write
// with it: until done is called, a newer token's Admit for the same job
// waits (bounded by its ctx), and no older token is admitted afterwards. So
// no write with an older token runs alongside or after one with a newer
// token, within this process; the check and the write are one step. done
// must be called once the write is finished, also when it failed; calling it
// again does nothing.
//
// Like Check, it admits in slot 0; AdmitSlot admits in a slot of a job of
// several slots.
func (c *Checker) Admit(ctx context.Context, job string, token int64) (done func(), err error) {
	return c.admit(ctx, job, noSlot, token)
}

// AdmitSlot is Admit for a token of the given slot, checked as CheckSlot
// does: the writes of one slot are ordered as Admit orders a job's, and
// the writes of different slots run side by side.
func (c *Checker) AdmitSlot(ctx context.Context, job string, slot int, token int64) (done func(), err error) {
	if err := c.validSlot(slot); err != nil {
		return nil, err
	}
	return c.admit(ctx, job, slot, token)
}

// admit is Admit in slot.
func (c *Checker) admit(ctx context.Context, job string, slot int, token int64) (done func(), err error) {
	e, err := c.check(ctx, job, slot, token)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	for e.evicted {
		// Forgotten to make room between the check and now: admit on the
		// job's new entry, which later checks will find.
		e.mu.Unlock()
		c.count().accepted.Add(^uint64(0))
		if e, err = c.check(ctx, job, slot, token); err != nil {
			return nil, err
		}
		e.mu.Lock()
	}
	a := e.admission(slot)
	for a.active > 0 && a.token < token {
		drained, older := a.drained, a.token
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
	if k := e.state.mark(slot); token < k.high {
		err := &StaleError{Job: job, Slot: max(slot, 0), Token: token, Newest: k.high, Live: k.highLive}
		e.mu.Unlock()
		n := c.count()
		n.accepted.Add(^uint64(0))
		n.stale.Add(1)
		return nil, err
	}
	a.active++
	a.token = token
	e.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			a.active--
			if a.active == 0 {
				close(a.drained)
				a.drained = make(chan struct{})
			}
		})
	}, nil
}

// check decides about token in slot and returns job's entry.
func (c *Checker) check(ctx context.Context, job string, slot int, token int64) (*entry, error) {
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
	m := e.memo.Load()
	if slot >= len(m.slots) {
		e.grow(slot)
		m = e.memo.Load()
	}
	decided, err := c.fromMemory(m, job, slot, token, now)
	switch {
	case !decided:
		err = c.ask(ctx, e, slot, token)
	case err == nil && m.slots != nil && token > m.mark(slot).high:
		// Accepted from the feed's newest token, above its slot's mark.
		e.raise(slot, token)
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
func (c *Checker) fromMemory(m *memo, job string, slot int, token int64, now time.Time) (decided bool, err error) {
	k := m.mark(slot)
	if token < k.high || token == k.high && !k.highLive {
		// Below the mark; or the mark's own run has ended, which no run
		// comes back from (a renewal after the liveness expired is refused).
		return true, &StaleError{Job: job, Slot: max(slot, 0), Token: token, Newest: k.high, Live: k.highLive}
	}
	switch c.pattern {
	case BoundedStaleness:
		if token == k.confirmed && now.Sub(k.confirmedAt) < c.maxStale {
			return true, nil
		}
	case WriteThrough:
		// The feed tells the job's newest token, in whichever slot: the
		// other live runs of a job of several slots are asked about.
		if m.feedOK && token == m.feedToken && c.since(now)-c.syncedAt.Load() < int64(c.maxLag) {
			if m.feedLive {
				return true, nil
			}
			return true, &StaleError{Job: job, Slot: max(slot, 0), Token: token, Newest: m.job.high, Live: m.job.high > token && m.job.highLive}
		}
	}
	return false, nil
}

// ask asks the store about token and learns from the answer.
func (c *Checker) ask(ctx context.Context, e *entry, slot int, token int64) error {
	sent := c.clock.Now()
	c.count().storeChecks.Add(1)
	err := c.store.CheckToken(ctx, e.job, token)
	var se *leasestore.StaleTokenError
	e.mu.Lock()
	defer e.mu.Unlock()
	st := &e.state
	k := st.mark(slot)
	switch {
	case err == nil:
		if token < k.high {
			// A newer token was learned while the store answered.
			return &StaleError{Job: e.job, Slot: max(slot, 0), Token: token, Newest: k.high, Live: k.highLive}
		}
		st.job.learn(token, true)
		k.learn(token, true)
		if sent.After(e.deniedAt) && (token > k.confirmed || sent.After(k.confirmedAt)) {
			k.confirmed, k.confirmedAt = token, sent
		}
		e.publish()
		return nil
	case errors.As(err, &se):
		// The store's current token is the job's, of no known slot: it
		// raises the job's mark, and ends the slot marks it names.
		st.job.learn(se.Current, se.Live)
		st.ended(token)
		if !se.Live {
			st.ended(se.Current)
		}
		if sent.After(e.deniedAt) {
			e.deniedAt = sent
		}
		if k.confirmed == token {
			k.confirmedAt = time.Time{}
		}
		e.publish()
		return &StaleError{Job: e.job, Slot: max(slot, 0), Token: token, Newest: st.job.high, Live: st.job.highLive, FromStore: true}
	default:
		return fmt.Errorf("fence: check token %d of job %q: %w", token, e.job, err)
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
