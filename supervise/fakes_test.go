package supervise

import (
	"context"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/leasestore"
)

// fakeClock is a Clock whose time moves only when a test calls Advance.
// Advance returns once every timer it fired was received by its reader (or
// stopped), so a test knows the supervisor has seen the tick.
type fakeClock struct {
	mu     sync.Mutex
	armed  *sync.Cond // broadcast whenever a timer is armed
	now    time.Time
	timers []*fakeTimer
}

func newFakeClock() *fakeClock {
	c := &fakeClock{now: time.Date(2026, 11, 21, 2, 0, 0, 0, time.UTC)}
	c.armed = sync.NewCond(&c.mu)
	return c
}

// awaitTimer returns once a timer is armed to fire at when: the sign that
// the supervisor has handled whatever made it set that timer.
func (c *fakeClock) awaitTimer(t *testing.T, when time.Time) {
	t.Helper()
	timedOut := false
	guard := time.AfterFunc(hangGuard, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		timedOut = true
		c.armed.Broadcast()
	})
	defer guard.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for !c.hasTimerAt(when) {
		if timedOut {
			t.Fatalf("no timer was set to fire at %s", when)
		}
		c.armed.Wait()
	}
}

func (c *fakeClock) hasTimerAt(when time.Time) bool {
	for _, t := range c.timers {
		if t.active && t.when.Equal(when) {
			return true
		}
	}
	return false
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, ch: make(chan time.Time)}
	t.arm(c.now.Add(d))
	c.timers = append(c.timers, t)
	return t
}

// Advance moves time forward by d, firing due timers in order of their
// deadlines, and waits until each fired value was delivered.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *fakeTimer
		for _, t := range c.timers {
			if t.active && !t.when.After(target) && (next == nil || t.when.Before(next.when)) {
				next = t
			}
		}
		if next == nil {
			c.now = target
			c.mu.Unlock()
			return
		}
		if next.when.After(c.now) {
			c.now = next.when
		}
		next.active = false
		ch, cancel, when := next.ch, next.cancel, next.when
		c.mu.Unlock()
		select {
		case ch <- when:
		case <-cancel:
		}
	}
}

type fakeTimer struct {
	c      *fakeClock
	ch     chan time.Time
	when   time.Time
	active bool
	cancel chan struct{} // closed when the timer is stopped or reset
}

// arm sets the timer; the clock's lock is held.
func (t *fakeTimer) arm(when time.Time) {
	t.when, t.active = when, true
	t.cancel = make(chan struct{})
	t.c.armed.Broadcast()
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.active = false
	close(t.cancel)
	t.cancel = make(chan struct{})
	return was
}

func (t *fakeTimer) Reset(d time.Duration) {
	t.Stop()
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.arm(t.c.now.Add(d))
}

// renewCall is one Renew the fake store received; the test answers it.
type renewCall struct {
	at    time.Time
	reply chan error
}

// fakeStore answers Acquire from a queue and hands each Renew to the test.
// Methods the supervisor does not call are left to the nil embedded Store.
type fakeStore struct {
	leasestore.Store
	clock    *fakeClock
	mu       sync.Mutex
	acquires []func(leasestore.AcquireRequest) (*leasestore.Lease, error)
	renews   chan renewCall
	released chan leasestore.Outcome
	notify   chan struct{}
	holder   *leasestore.Holder // what Status reports as the live lease
}

func newFakeStore(c *fakeClock) *fakeStore {
	return &fakeStore{clock: c, renews: make(chan renewCall), released: make(chan leasestore.Outcome, 1), notify: make(chan struct{}, 1)}
}

// grant queues an Acquire that succeeds with token.
func (f *fakeStore) grant(token int64) {
	f.queue(func(req leasestore.AcquireRequest) (*leasestore.Lease, error) {
		return &leasestore.Lease{Job: req.Job, Holder: req.Holder, Token: token, Attempt: 1, TTL: req.TTL, GrantedAt: f.clock.Now()}, nil
	})
}

// refuse queues an Acquire that fails with err.
func (f *fakeStore) refuse(err error) {
	f.queue(func(leasestore.AcquireRequest) (*leasestore.Lease, error) { return nil, err })
}

func (f *fakeStore) queue(a func(leasestore.AcquireRequest) (*leasestore.Lease, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acquires = append(f.acquires, a)
}

func (f *fakeStore) Acquire(_ context.Context, req leasestore.AcquireRequest) (*leasestore.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.acquires) == 0 {
		return nil, &leasestore.UnavailableError{Op: "acquire", Err: context.DeadlineExceeded}
	}
	a := f.acquires[0]
	f.acquires = f.acquires[1:]
	return a(req)
}

func (f *fakeStore) Renew(ctx context.Context, _ *leasestore.Lease) error {
	call := renewCall{at: f.clock.Now(), reply: make(chan error, 1)}
	select {
	case f.renews <- call:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-call.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeStore) Release(_ context.Context, _ *leasestore.Lease, out leasestore.Outcome) error {
	f.released <- out
	return nil
}

func (f *fakeStore) Status(_ context.Context, job string) (*leasestore.JobStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &leasestore.JobStatus{Job: job, State: leasestore.StateIdle, Holder: f.holder}, nil
}

func (f *fakeStore) Subscribe(context.Context, string) (leasestore.Subscription, error) {
	return fakeSub{f.notify}, nil
}

type fakeSub struct{ c chan struct{} }

func (s fakeSub) Released() <-chan struct{} { return s.c }
func (s fakeSub) Close() error              { return nil }

// sigAt is a signal the fake child's group received, with the fake time.
type sigAt struct {
	sig syscall.Signal
	at  time.Time
}

type fakeChild struct {
	clock   *fakeClock
	signals chan sigAt
	done    chan Exit
	env     []string
	pgid    int // the group it was started in
}

func (c *fakeChild) PID() int { return 4243 }
func (c *fakeChild) Signal(sig syscall.Signal) error {
	c.signals <- sigAt{sig, c.clock.Now()}
	return nil
}
func (c *fakeChild) Done() <-chan Exit { return c.done }

// SignalProcess records sig as sent to the child alone, with a negative
// number so tests can tell it from the group's.
func (c *fakeChild) SignalProcess(sig syscall.Signal) error {
	c.signals <- sigAt{-sig, c.clock.Now()}
	return nil
}

func closed() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// fakeWatchdog records the deadlines it was given.
type fakeWatchdog struct {
	mu      sync.Mutex
	updates chan time.Duration // every deadline it was given, as time left
	died    chan struct{}      // closed by a test to make the watchdog die
	ready   chan struct{}      // closed when it ignores forwarded signals
	closed  bool
}

func (w *fakeWatchdog) Done() <-chan struct{}  { return w.died }
func (w *fakeWatchdog) Ready() <-chan struct{} { return w.ready }

func (w *fakeWatchdog) Group() int { return 4242 }

func (w *fakeWatchdog) SetDeadline(left time.Duration) error {
	w.updates <- left
	return nil
}

func (w *fakeWatchdog) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	return nil
}

// harness runs one Supervisor against the fakes.
type harness struct {
	t       *testing.T
	clock   *fakeClock
	store   *fakeStore
	child   *fakeChild
	wd      *fakeWatchdog
	signals chan os.Signal
	started chan *fakeChild
	// startErr, when set, is what starting the command fails with.
	startErr error
	held     chan *leasestore.HeldError
	result   chan runResult
	cfg      Config
}

type runResult struct {
	ending Ending
	err    error
}

const (
	testTTL       = 3 * time.Second
	testHeartbeat = time.Second
	testSafety    = 1500 * time.Millisecond
	testGrace     = 2 * time.Second
)

func newHarness(t *testing.T, edit func(*Config)) *harness {
	t.Helper()
	clock := newFakeClock()
	h := &harness{
		t:       t,
		clock:   clock,
		store:   newFakeStore(clock),
		wd:      &fakeWatchdog{updates: make(chan time.Duration, 64), died: make(chan struct{}), ready: closed()},
		signals: make(chan os.Signal),
		started: make(chan *fakeChild, 1),
		held:    make(chan *leasestore.HeldError, 16),
		result:  make(chan runResult, 1),
		cfg: Config{
			Job: "nightly", Command: []string{"./job.sh"}, WorkerID: "w1", Host: "h1", PID: 7,
			TTL: testTTL, Heartbeat: testHeartbeat, Safety: testSafety, Grace: testGrace,
		},
	}
	if edit != nil {
		edit(&h.cfg)
	}
	h.cfg.SetDefaults()
	if err := h.cfg.Validate(); err != nil {
		t.Fatalf("test config invalid: %v", err)
	}
	return h
}

// start runs the supervisor in the background.
func (h *harness) start() {
	s := &Supervisor{
		Store: h.store,
		Clock: h.clock,
		Log:   zerolog.Nop(),
		Start: func(env []string, pgid int) (Child, error) {
			if h.startErr != nil {
				return nil, h.startErr
			}
			c := &fakeChild{clock: h.clock, signals: make(chan sigAt, 64), done: make(chan Exit, 1), env: env, pgid: pgid}
			h.child = c
			h.started <- c
			return c, nil
		},
		Watchdog: func() (Watchdog, error) { return h.wd, nil },
		Signals:  h.signals,
		OnWait:   func(e *leasestore.HeldError) { h.held <- e },
	}
	go func() {
		e, err := s.Run(context.Background(), h.cfg)
		h.result <- runResult{e, err}
	}()
}

// waitStarted waits for the child to start and the supervisor's loop to
// set its timers (the heartbeat timer is the last one it sets).
func (h *harness) waitStarted() *fakeChild {
	h.t.Helper()
	select {
	case c := <-h.started:
		h.clock.awaitTimer(h.t, h.clock.Now().Add(h.cfg.Heartbeat))
		return c
	case r := <-h.result:
		h.t.Fatalf("run ended before the child started: %+v", r)
	case <-time.After(hangGuard):
		h.t.Fatal("child never started")
	}
	return nil
}

// noChildStarted fails the test with why if the supervisor started a child.
func (h *harness) noChildStarted(why string) {
	h.t.Helper()
	select {
	case <-h.started:
		h.t.Fatal(why)
	default:
	}
}

// nextRenew waits for the supervisor's next Renew call.
func (h *harness) nextRenew() renewCall {
	h.t.Helper()
	select {
	case c := <-h.store.renews:
		return c
	case <-time.After(hangGuard):
		h.t.Fatal("no renewal was sent")
	}
	return renewCall{}
}

// barrier returns once the supervisor's loop is back in its select, so every
// event it received before has been handled. It forwards SIGUSR2, which the
// tests using it ignore.
func (h *harness) barrier() {
	h.t.Helper()
	select {
	case h.signals <- syscall.SIGUSR2:
	case <-time.After(hangGuard):
		h.t.Fatal("the supervisor's loop is stuck")
	}
}

// next waits for the next signal other than the barrier's SIGUSR2.
func (c *fakeChild) next(t *testing.T) sigAt {
	t.Helper()
	for {
		select {
		case s := <-c.signals:
			if s.sig != syscall.SIGUSR2 {
				return s
			}
		case <-time.After(hangGuard):
			t.Fatal("the child's group received no signal")
			return sigAt{}
		}
	}
}

// received lists the signals other than the barrier's SIGUSR2 that the group
// received so far.
func (c *fakeChild) received() []sigAt {
	var out []sigAt
	for {
		select {
		case s := <-c.signals:
			if s.sig != syscall.SIGUSR2 {
				out = append(out, s)
			}
		default:
			return out
		}
	}
}

// end makes the child exit and returns how the run ended and the outcome
// released.
func (h *harness) end(e Exit) (Ending, leasestore.Outcome) {
	h.t.Helper()
	h.child.done <- e
	return h.wait()
}

func (h *harness) wait() (Ending, leasestore.Outcome) {
	h.t.Helper()
	var out leasestore.Outcome
	select {
	case out = <-h.store.released:
	case <-time.After(hangGuard):
		h.t.Fatal("the lease was never released")
	}
	select {
	case r := <-h.result:
		if r.err != nil {
			h.t.Fatalf("Run returned error %v", r.err)
		}
		return r.ending, out
	case <-time.After(hangGuard):
		h.t.Fatal("Run did not return")
	}
	return Ending{}, out
}

// hangGuard only catches hangs; no test relies on it for timing.
const hangGuard = 10 * time.Second

// renewOK answers the next renewal with success and waits until the
// supervisor has moved its deadline (it tells the watchdog).
func (h *harness) renewOK() renewCall {
	h.t.Helper()
	c := h.nextRenew()
	c.reply <- nil
	select {
	case <-h.wd.updates:
	case <-time.After(hangGuard):
		h.t.Fatal("a confirmed renewal did not move the deadline")
	}
	return c
}
