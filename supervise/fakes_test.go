package supervise

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/clock/fakeclock"
	"github.com/leasectl/leasectl/leasestore"
)

// renewCall is one Renew the fake store received; the test answers it.
type renewCall struct {
	at    time.Time
	rtt   time.Duration // the round trip the lease reported
	reply chan error
}

// fakeStore is a leasestore.Driver that answers Acquire from a queue and
// hands each Renew to the test. Like every store, its Acquire is idempotent
// for the holder of the lease it granted last. It has the Leaser half
// alone: the supervisor calls nothing else, and the nil Driver it embeds
// would panic if it did.
type fakeStore struct {
	leasestore.Driver
	clock    *fakeclock.Clock
	mu       sync.Mutex
	acquires []func(leasestore.AcquireRequest) (*leasestore.Lease, error)
	asked    int               // Acquire calls received
	granted  *leasestore.Lease // the live lease, until released
	renews   chan renewCall
	released chan leasestore.Outcome
	failRels []error // what the next Release calls fail with
	lates    []leasestore.LateOutcome
	failLate error // what RecordLate fails with
	// lateWithdraws: RecordLate without a token withdraws a crash too (one
	// with a token always does).
	lateWithdraws bool
	// stop is what a confirmed renewal reports as an operator's request
	// that the run stop (Lease.Stop); nil: none.
	stop     *leasestore.StopRequest
	failSubs []error            // what the next Subscribe calls fail with
	subs     int                // Subscribe calls received
	history  []leasestore.Event // what Status says of the job's history
	notify   chan struct{}
	// subClose, if not nil, holds each subscription's Close until it is
	// closed: a Close that takes long (an inotify instance's).
	subClose chan struct{}
	closing  int // subscriptions whose Close was called
	closed   int // subscriptions whose Close returned
}

var _ leasestore.Driver = (*fakeStore)(nil)

func newFakeStore(c *fakeclock.Clock) *fakeStore {
	return &fakeStore{clock: c, renews: make(chan renewCall), released: make(chan leasestore.Outcome, 1), notify: make(chan struct{}, 1)}
}

// grant queues an Acquire that succeeds with token.
func (f *fakeStore) grant(token int64) {
	f.queue(func(req leasestore.AcquireRequest) (*leasestore.Lease, error) { return f.grantNow(req, token), nil })
}

// grantNow makes req's holder the holder of a lease with token, as the
// store's side of a successful Acquire, and returns the lease.
func (f *fakeStore) grantNow(req leasestore.AcquireRequest, token int64) *leasestore.Lease {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.granted = &leasestore.Lease{Job: req.Job, Holder: req.Holder, Token: token, Attempt: 1, TTL: req.TTL, GrantedAt: f.clock.Now()}
	l := *f.granted
	return &l
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

// Acquire returns the live lease again to its holder; otherwise it answers
// with the next queued step, or, with none left, as a store that does not
// answer in time.
func (f *fakeStore) Acquire(_ context.Context, req leasestore.AcquireRequest) (*leasestore.Lease, error) {
	f.mu.Lock()
	f.asked++
	if f.granted != nil && f.granted.Holder == req.Holder {
		l := *f.granted
		f.mu.Unlock()
		return &l, nil
	}
	if len(f.acquires) == 0 {
		f.mu.Unlock()
		return nil, errNoAnswer
	}
	a := f.acquires[0]
	f.acquires = f.acquires[1:]
	f.mu.Unlock()
	return a(req)
}

// errNoAnswer is how a store call fails when its context's deadline passed
// before the store answered.
var errNoAnswer = &leasestore.UnavailableError{Op: "acquire", Err: context.DeadlineExceeded}

// acquireCalls is how many Acquire calls the store received.
func (f *fakeStore) acquireCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked
}

func (f *fakeStore) Renew(ctx context.Context, l *leasestore.Lease) error {
	call := renewCall{at: f.clock.Now(), rtt: l.RTT, reply: make(chan error, 1)}
	select {
	case f.renews <- call:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-call.reply:
		if err == nil {
			f.mu.Lock()
			l.Stop = f.stop
			f.mu.Unlock()
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// failReleases makes the next Release calls fail with errs, in order.
func (f *fakeStore) failReleases(errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failRels = append(f.failRels, errs...)
}

func (f *fakeStore) Release(_ context.Context, l *leasestore.Lease, out leasestore.Outcome) error {
	f.mu.Lock()
	if len(f.failRels) > 0 {
		err := f.failRels[0]
		f.failRels = f.failRels[1:]
		f.mu.Unlock()
		return err
	}
	if f.granted != nil && f.granted.Token == l.Token {
		f.granted = nil
	}
	f.mu.Unlock()
	f.released <- out
	return nil
}

// RecordLate records late, which the test reads from lates, or fails with
// failLate.
func (f *fakeStore) RecordLate(_ context.Context, late leasestore.LateOutcome) (leasestore.Correction, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lates = append(f.lates, late)
	return leasestore.Correction{CrashWithdrawn: late.Token != 0 || f.lateWithdraws}, f.failLate
}

// recordedLate returns the late outcomes RecordLate received.
func (f *fakeStore) recordedLate() []leasestore.LateOutcome {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.lates)
}

// fakeOutbox keeps what it is given.
type fakeOutbox struct {
	mu   sync.Mutex
	kept []leasestore.LateOutcome
}

func (o *fakeOutbox) Put(late leasestore.LateOutcome) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.kept = append(o.kept, late)
	return nil
}

func (o *fakeOutbox) Dir() string { return "/state/outbox" }

func (o *fakeOutbox) contents() []leasestore.LateOutcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.kept)
}

// Limits are one slot and every TTL, as a store of one run per job would
// say; queueStore grants more slots.
func (f *fakeStore) Limits() leasestore.Limits { return leasestore.Limits{MaxSlots: 1} }

// Leave does nothing: queueStore records who leaves.
func (f *fakeStore) Leave(context.Context, string, string) error { return nil }

// Status says the job's history is f.history; the fake knows nothing else.
func (f *fakeStore) Status(_ context.Context, job string) (*leasestore.JobStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &leasestore.JobStatus{History: slices.Clone(f.history)}, nil
}

// subscribeCalls is how many Subscribe calls the store received.
func (f *fakeStore) subscribeCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.subs
}

// failSubscribes makes the next Subscribe calls fail with errs, in order.
func (f *fakeStore) failSubscribes(errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failSubs = append(f.failSubs, errs...)
}

// errSubscribeUnanswered, given to failSubscribes, makes a Subscribe call
// wait for its context to end: a store whose answer never comes back.
var errSubscribeUnanswered = errors.New("no answer")

func (f *fakeStore) Subscribe(ctx context.Context, _, _ string) (leasestore.Subscription, error) {
	f.mu.Lock()
	f.subs++
	var err error
	if len(f.failSubs) > 0 {
		err = f.failSubs[0]
		f.failSubs = f.failSubs[1:]
	}
	f.mu.Unlock()
	switch {
	case err == errSubscribeUnanswered:
		<-ctx.Done()
		return nil, &leasestore.UnavailableError{Op: "subscribe", Err: ctx.Err()}
	case err != nil:
		return nil, err
	}
	return fakeSub{f}, nil
}

// subsClosing and subsClosed are how many subscriptions' Close was called,
// and returned.
func (f *fakeStore) subsClosing() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closing
}

func (f *fakeStore) subsClosed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// fakeSub is a subscription to f.notify.
type fakeSub struct{ f *fakeStore }

func (s fakeSub) Released() <-chan struct{} { return s.f.notify }

// Close returns once s.f.subClose, if any, is closed.
func (s fakeSub) Close() error {
	s.f.mu.Lock()
	s.f.closing++
	s.f.mu.Unlock()
	if s.f.subClose != nil {
		<-s.f.subClose
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.closed++
	return nil
}

// sigAt is a signal the fake child's group received, with the fake time.
type sigAt struct {
	sig syscall.Signal
	at  time.Time
}

type fakeChild struct {
	clock     *fakeclock.Clock
	signals   chan sigAt
	done      chan Exit
	stopped   chan syscall.Signal // a test's job-control stops
	continues chan struct{}       // a value per Continue
	env       []string
	pgid      int // the group it was started in
}

func (c *fakeChild) Stopped() <-chan syscall.Signal { return c.stopped }

func (c *fakeChild) Continue() error {
	c.continues <- struct{}{}
	return nil
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
	fired   chan struct{}      // closed by a test: the watchdog killed the group at its deadline
	ready   chan struct{}      // closed when it ignores forwarded signals
	closes  int                // Close calls
}

func (w *fakeWatchdog) Done() <-chan struct{}  { return w.died }
func (w *fakeWatchdog) Fired() <-chan struct{} { return w.fired }
func (w *fakeWatchdog) Ready() <-chan struct{} { return w.ready }

func (w *fakeWatchdog) Group() int { return 4242 }

func (w *fakeWatchdog) SetToken(int64) error { return nil }
func (w *fakeWatchdog) Continue() error      { return nil }

func (w *fakeWatchdog) SetDeadline(left time.Duration) error {
	w.updates <- left
	return nil
}

func (w *fakeWatchdog) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closes++
	return nil
}

func (w *fakeWatchdog) closeCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closes
}

// harness runs one Supervisor against the fakes.
type harness struct {
	t       *testing.T
	clock   *fakeclock.Clock
	store   *fakeStore
	child   *fakeChild
	wd      *fakeWatchdog
	outbox  *fakeOutbox
	notices *fakeNotices
	signals chan os.Signal
	started chan *fakeChild
	// startErr, when set, is what starting the command fails with.
	startErr error
	// closingAtStart is how many subscriptions' Close had been called when
	// the command was started.
	closingAtStart int
	// startHook, when set, runs instead of starting the command and returns
	// why it could not start.
	startHook func() error
	// log, when set, gets the supervisor's log lines.
	log io.Writer
	// wdErr, when set, is what starting the watchdog fails with.
	wdErr    error
	held     chan *leasestore.HeldError
	suspends chan syscall.Signal // what Suspend was called with
	result   chan runResult
	cfg      Config
	// jitter is the Supervisor's Jitter: no jitter, unless a test sets it.
	jitter func(time.Duration) time.Duration
	// storeAs, when set, is the store the Supervisor is given, made of
	// the fake store (to give it an ability the fake store lacks).
	storeAs func(*fakeStore) leasestore.Driver
	// watchExit is the Supervisor's WatchExit.
	watchExit func(pid int) (<-chan struct{}, func())
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
	clock := fakeclock.New(time.Date(2026, 11, 21, 2, 0, 0, 0, time.UTC))
	h := &harness{
		t:        t,
		clock:    clock,
		store:    newFakeStore(clock),
		wd:       &fakeWatchdog{updates: make(chan time.Duration, 64), died: make(chan struct{}), fired: make(chan struct{}), ready: closed()},
		outbox:   &fakeOutbox{},
		notices:  &fakeNotices{},
		signals:  make(chan os.Signal),
		started:  make(chan *fakeChild, 1),
		held:     make(chan *leasestore.HeldError, 16),
		suspends: make(chan syscall.Signal, 4),
		result:   make(chan runResult, 1),
		jitter:   func(d time.Duration) time.Duration { return d },
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
	log := zerolog.Nop()
	if h.log != nil {
		log = zerolog.New(h.log)
	}
	var store leasestore.Driver = h.store
	if h.storeAs != nil {
		store = h.storeAs(h.store)
	}
	s := &Supervisor{
		Store: leasestore.New(store),
		Clock: h.clock,
		Log:   log,
		Start: func(env []string, pgid int) (Child, error) {
			if h.startErr != nil {
				return nil, h.startErr
			}
			if h.startHook != nil {
				return nil, h.startHook()
			}
			c := &fakeChild{clock: h.clock, signals: make(chan sigAt, 64), done: make(chan Exit, 1), env: env, pgid: pgid,
				stopped: make(chan syscall.Signal), continues: make(chan struct{}, 4)}
			h.child = c
			h.closingAtStart = h.store.subsClosing()
			h.started <- c
			return c, nil
		},
		Watchdog: StartWatchdogWith(func() (Watchdog, error) {
			if h.wdErr != nil {
				return nil, h.wdErr
			}
			return h.wd, nil
		}),
		Jitter:    h.jitter,
		Signals:   h.signals,
		Outbox:    h.outbox,
		Notices:   h.notices,
		OnWait:    func(e *leasestore.HeldError) { h.held <- e },
		WatchExit: h.watchExit,
		Suspend:   func(sig syscall.Signal) { h.suspends <- sig },
	}
	go func() {
		e, err := s.Run(context.Background(), h.cfg)
		h.result <- runResult{e, err}
	}()
}

// waitStarted waits for the child to start and the supervisor's loop to
// set its timers (the heartbeat timer is the last one it sets) and, if the
// watchdog is ready, to know it.
func (h *harness) waitStarted() *fakeChild {
	h.t.Helper()
	select {
	case c := <-h.started:
		h.clock.AwaitTimer(h.t, h.clock.Now().Add(h.cfg.Heartbeat))
		h.awaitWatchdogReady(c)
		return c
	case r := <-h.result:
		h.t.Fatalf("run ended before the child started: %+v", r)
	case <-time.After(hangGuard):
		h.t.Fatal("child never started")
	}
	return nil
}

// awaitWatchdogReady returns once the loop has seen that the watchdog is
// ready, if it is: until then the loop sends signals to the child alone,
// and it sees the readiness in its own time, maybe after a timer that fired
// at the same moment. It forwards SIGUSR2 until one reaches the group.
func (h *harness) awaitWatchdogReady(c *fakeChild) {
	h.t.Helper()
	select {
	case <-h.wd.ready:
	default:
		return // still starting up: the test is about that
	}
	for {
		h.barrier()
		select {
		case s := <-c.signals:
			if s.sig == syscall.SIGUSR2 {
				return
			}
		case <-time.After(hangGuard):
			h.t.Fatal("the forwarded SIGUSR2 reached no one")
		}
	}
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

// refused waits for Run to return without starting the child, and returns
// what it returned.
func (h *harness) refused() runResult {
	h.t.Helper()
	select {
	case r := <-h.result:
		h.noChildStarted("the child started")
		h.watchdogStopped()
		return r
	case <-time.After(hangGuard):
		h.t.Fatal("Run did not return")
	}
	return runResult{}
}

// watchdogStopped fails the test unless Run, which has returned, stopped
// its watchdog exactly once: no watchdog may outlive its run, however the
// run ended.
func (h *harness) watchdogStopped() {
	h.t.Helper()
	if n := h.wd.closeCount(); n != 1 {
		h.t.Errorf("watchdog stopped %d times, want once", n)
	}
}

func (h *harness) wait() (Ending, leasestore.Outcome) {
	h.t.Helper()
	out := h.released()
	return h.returned(), out
}

// released waits for the run's release and returns its outcome.
func (h *harness) released() leasestore.Outcome {
	h.t.Helper()
	select {
	case out := <-h.store.released:
		return out
	case <-time.After(hangGuard):
		h.t.Fatal("the lease was never released")
	}
	return leasestore.Outcome{}
}

// returned waits for Run to return without an error, with its watchdog
// stopped, and returns how the run ended.
func (h *harness) returned() Ending {
	h.t.Helper()
	select {
	case r := <-h.result:
		if r.err != nil {
			h.t.Fatalf("Run returned error %v", r.err)
		}
		h.watchdogStopped()
		return r.ending
	case <-time.After(hangGuard):
		h.t.Fatal("Run did not return")
	}
	return Ending{}
}

// hangGuard only catches hangs; no test relies on it for timing.
const hangGuard = 10 * time.Second

// renewOK answers the next renewal with success and waits until the
// supervisor has moved its deadline (it tells the watchdog) and set the
// next heartbeat, a heartbeat after the renewal was sent: a test that moves
// the clock before that would move it past a timer not yet set.
func (h *harness) renewOK() renewCall {
	h.t.Helper()
	c := h.nextRenew()
	c.reply <- nil
	select {
	case <-h.wd.updates:
	case <-time.After(hangGuard):
		h.t.Fatal("a confirmed renewal did not move the deadline")
	}
	h.clock.AwaitTimer(h.t, c.at.Add(h.cfg.Heartbeat))
	return c
}
