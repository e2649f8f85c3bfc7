package supervise

import (
	"sync"
	"time"
)

// Watchdog is the separate process that kills the child's group when the
// safety deadline passes without an update, or when the supervisor vanishes.
type Watchdog interface {
	// Group is the process group the watchdog leads and kills; the child
	// joins it.
	Group() int
	// SetDeadline moves the kill deadline; left is the time from now.
	SetDeadline(left time.Duration) error
	// SetToken tells the watchdog the run's fencing token, which its last
	// word carries like every other line of the run.
	SetToken(token int64) error
	// Continue resumes the watchdog should a job-control stop (Ctrl-Z) have
	// reached it before it ignored such stops, in its first milliseconds:
	// it must keep guarding the group while the supervisor is stopped.
	Continue() error
	// Ready is closed once the watchdog ignores the signals forwarded to
	// the group; until then a forwarded signal would kill it.
	Ready() <-chan struct{}
	// Fired is closed when the watchdog said it is killing the group
	// because its deadline passed: the child's SIGKILL is then its doing.
	Fired() <-chan struct{}
	// Done is closed when the watchdog process has exited, for whatever
	// reason; if it fired, Fired is closed first.
	Done() <-chan struct{}
	// Close stops the watchdog after the run ended and the group was killed.
	// Once it returned, Fired is closed if the watchdog ever fired.
	Close() error
}

// PendingWatchdog is a watchdog on its way up. Starting the watchdog
// process (a fork and an exec) costs as much as opening the store and
// acquiring the lease, so it is begun first and overlaps them; the run
// waits for it only when its child is about to start. It is the one way the
// supervisor gets its watchdog, and whoever holds it may stop it at any
// time: Close is idempotent.
type PendingWatchdog struct {
	started chan struct{} // closed once the start returned
	wd      Watchdog      // set before started is closed
	err     error         // set before started is closed

	closeOnce sync.Once
	closeErr  error
}

// StartWatchdogWith begins starting a watchdog with start, in the
// background, and returns at once. StartWatchdog starts the real process;
// tests start fakes.
func StartWatchdogWith(start func() (Watchdog, error)) *PendingWatchdog {
	p := &PendingWatchdog{started: make(chan struct{})}
	go func() {
		defer close(p.started)
		p.wd, p.err = start()
	}()
	return p
}

// wait returns the watchdog once it has started, or why it could not. A nil
// PendingWatchdog stands for running without a watchdog: nil, nil.
func (p *PendingWatchdog) wait() (Watchdog, error) {
	if p == nil {
		return nil, nil
	}
	<-p.started
	return p.wd, p.err
}

// Close stops the watchdog, first waiting for its start to end if need be,
// so that no watchdog process outlives the run it was started for. Only the
// first call stops it; later calls return what the first returned. A
// watchdog that failed to start, or a nil PendingWatchdog, has nothing to
// stop.
func (p *PendingWatchdog) Close() error {
	if p == nil {
		return nil
	}
	p.closeOnce.Do(func() {
		if wd, err := p.wait(); err == nil && wd != nil {
			p.closeErr = wd.Close()
		}
	})
	return p.closeErr
}

// tellWatchdog calls f on the watchdog, if the run has one; the watchdog
// failing is logged, not fatal: the supervisor's own deadline still holds.
func (r *run) tellWatchdog(f func() error) {
	if r.wd == nil {
		return
	}
	if err := f(); err != nil {
		r.log.Warn().Err(err).Msg("the watchdog is unreachable; the supervisor's own deadline still applies")
	}
}

// closeWatchdog stops the watchdog once the child's group is dead or was
// never started.
func (r *run) closeWatchdog() {
	r.tellWatchdog(r.s.Watchdog.Close)
}
