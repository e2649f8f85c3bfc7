package supervise

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/clock"
	"github.com/leasectl/leasectl/leasestore"
)

// Supervisor runs commands under leases. Its fields are its dependencies, so
// tests can give it a fake store, clock, child and watchdog.
type Supervisor struct {
	// Store holds the leases: the supervisor uses the Leaser half of a
	// store, which also takes late outcomes and reads the job's history,
	// where the run finds its own grants that it never heard of.
	Store *leasestore.Store
	// Clock times the heartbeat, the safety deadline and the limits.
	Clock clock.Clock
	// Log gets every line of the run, with job, worker and token added.
	Log zerolog.Logger
	// Start starts the command with env added to its environment, in
	// process group pgid (the watchdog's), or in a new group of its own when
	// pgid is 0. A command that cannot start returns *StartError.
	Start func(env []string, pgid int) (Child, error)
	// Watchdog is the watchdog process, already on its way up (see
	// StartWatchdog); nil runs without one. Run stops it before it returns,
	// however the run ended.
	Watchdog *PendingWatchdog
	// Jitter spreads the retries after a store error (renewals, releases,
	// --wait's attempts): given the longest wait d, it returns the wait to
	// use, within [d/2, d]. Nil draws it uniformly from that range; tests
	// make it deterministic.
	Jitter func(d time.Duration) time.Duration
	// Signals delivers the operator's signals to forward (SIGINT, SIGTERM,
	// SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2), and SIGCONT, which resumes a run
	// that Suspend stopped.
	Signals <-chan os.Signal
	// OnWait, if set, is called each time a --wait attempt finds the job
	// held, to show who holds it.
	OnWait func(*leasestore.HeldError)
	// WatchExit, if set, watches a process of this host (see the function
	// WatchExit): a --wait run whose job is held by a supervisor on its
	// host tries again as soon as that supervisor exits, on a store that
	// can then prove the run over (leasestore.GroupNoter) instead of
	// waiting for its lease to expire; on the other stores it is not used.
	WatchExit func(pid int) (exited <-chan struct{}, stop func())
	// Suspend, if set, stops the supervisor's own process group with sig
	// when job control stopped the child (Ctrl-Z), so that the shell gets
	// its terminal back; the supervisor resumes the child when SIGCONT
	// arrives on Signals (`fg`, `bg`). Nothing renews the lease while the
	// supervisor is stopped: the watchdog kills the group at the deadline
	// unless the run is resumed before. Nil leaves a stopped child stopped
	// under a lease that is still renewed.
	Suspend func(sig syscall.Signal)
	// KillOrphans, if set, kills descendants that left the child's group
	// (reparented to this process as a child subreaper). It runs after the
	// watchdog was stopped, so every child left is an orphan.
	KillOrphans func()
	// Outbox, if set, keeps an outcome the store could not take in time (a
	// release that failed until releaseTimeout; an acquire given up with
	// its answer missing), for a later leasectl process on this host to
	// deliver with RecordLate. Without it, such a run is counted as a
	// crash, and a grant whose answer was lost holds the job for a TTL.
	Outbox Outbox
	// Notices, if set, records the run's events worth notifying right after
	// they happen: the previous run's crash its Acquire counted, its own
	// crash its release counted, its own lease lost with its child killed
	// (notices.go).
	Notices NoticeRecorder
}

// Outbox keeps late outcomes on the host until they are delivered (package
// outbox).
type Outbox interface {
	// Put keeps late; Dir names where, for the log.
	Put(late leasestore.LateOutcome) error
	Dir() string
}

// Reason says how a supervised run ended.
type Reason int

// How a run ends.
const (
	// ChildExited: the child exited on its own or after a forwarded signal.
	ChildExited Reason = iota
	// NotStarted: the command could not be started (126/127).
	NotStarted
	// LeaseLost: renewal failed or missed its safety window; the child was
	// killed (125).
	LeaseLost
	// MaxRuntime: --max-runtime passed; the child was stopped (124).
	MaxRuntime
	// Interrupted: a signal ended the wait before the lease was acquired.
	Interrupted
	// Stopped: an operator asked the run to stop (leasestore's Stop); the
	// child was stopped (80).
	Stopped
)

// Ending is how a run ended once the wait for the lease was over.
type Ending struct {
	Reason Reason
	Exit   Exit           // the child's exit (ChildExited, LeaseLost, MaxRuntime, Stopped)
	Start  *StartError    // NotStarted: why
	Signal syscall.Signal // Interrupted: the signal
	Lease  *leasestore.Lease
	Detail string // human words for the log and the store's history
}

// WaitTimeoutError is returned when --wait-timeout passed while waiting for
// the lease. It unwraps to what the last attempt got: the
// *leasestore.HeldError of another worker's lease, or the store's failure.
type WaitTimeoutError struct {
	Waited time.Duration
	Last   error
}

// Error says how long it waited and why the last attempt failed.
func (e *WaitTimeoutError) Error() string {
	return fmt.Sprintf("gave up after waiting %s: %v", e.Waited.Round(time.Millisecond), e.Last)
}

// Unwrap returns the last attempt's error.
func (e *WaitTimeoutError) Unwrap() error { return e.Last }

// Run acquires the lease for cfg.Job (waiting for it with cfg.Wait), runs
// the command under it, and releases it with the outcome. It returns an
// error when no lease was acquired (a TTL outside the range the store
// honours, held, quarantined, too soon, store unavailable, wait timeout);
// otherwise the Ending says how the run ended.
// ctx bounds the wait and the store calls made before the child starts; a
// started child is supervised until it exits, whatever ctx does.
//
// Run first applies cfg's defaults (SetDefaults) and checks it (Validate)
// and its TTL against the range the store honours (CheckStore), before any
// I/O: a config that breaks a rule is refused with the error naming it,
// for which IsConfigError holds.
func (s *Supervisor) Run(ctx context.Context, cfg Config) (Ending, error) {
	// Whichever way the run ends, even refused before its child started,
	// nothing is left for the watchdog to guard. (A run whose child started
	// stops it earlier, before looking for orphans; Close is idempotent.)
	defer s.Watchdog.Close()
	// The --wait subscription, closed beside the child's start, is closed
	// before the caller may close the store.
	var ws waitSub
	defer ws.close()
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return Ending{}, err
	}
	if err := cfg.CheckStore(s.Store.Limits()); err != nil {
		return Ending{}, err
	}
	log := s.Log.With().Str("job", cfg.Job).Str("worker", cfg.WorkerID).Logger()
	began := s.Clock.Now()
	lease, sent, ending, unanswered, err := s.acquire(ctx, cfg, log, &ws)
	if err != nil || lease == nil {
		return ending, err
	}
	recorded := s.notifyRecovered(cfg, lease, log)
	defer recorded()
	r := &run{
		s:       s,
		cfg:     cfg,
		lease:   lease,
		log:     log.With().Int64("token", lease.Token).Logger(),
		waitSub: &ws,
	}
	ending, err = r.start(sent)
	if unanswered {
		s.withdrawUnheardGrants(cfg, lease, sent.Sub(began), r.log)
	}
	return ending, err
}
