package supervise

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/internal/signame"
	"github.com/leasectl/leasectl/leasestore"
)

// releaseTimeout bounds the release after the child ended. If the store
// does not answer in time, the evidence stays and scan counts the run as
// a crash: the lease is never left half-released.
const releaseTimeout = 5 * time.Second

// finish ends the run after the direct child exited: it kills what is left of
// the group and the orphans, stops the watchdog and releases with the outcome.
func (r *run) finish(exit Exit) Ending {
	// The loop said why already when it stopped the child itself.
	said := r.stopping != ChildExited
	if err := r.child.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.log.Error().Err(err).Msg("killing what is left of the process group failed")
	}
	r.closeWatchdog()
	if r.s.KillOrphans != nil {
		r.s.KillOrphans()
	}
	out := r.outcome(exit)
	ending := Ending{Reason: r.stopping, Exit: exit, Lease: r.lease, Detail: string(out.Result) + " " + exit.String()}
	if out.Reason != "" {
		ending.Detail += ": " + out.Reason
	}
	// One line says why a run did not succeed: this one, unless the loop
	// said it already when it stopped the child (lease lost, --max-runtime).
	ev := r.log.Info()
	if out.Result != leasestore.ResultCompleted && !said {
		ev = r.log.Warn()
	}
	ev.Str("outcome", string(out.Result)).Int("exit_code", exit.ExitCode()).Dur("duration", out.Duration).
		Str("reason", out.Reason).Msg("child ended: " + ending.Detail)
	if r.release(out) && out.Result == leasestore.ResultCrashed {
		r.notifyCrash(out)
	}
	if r.stopping == LeaseLost {
		r.notifyLeaseLost()
	}
	return ending
}

// outcome classifies how the child ended. Stopped by leasectl (lease lost,
// --max-runtime) or ended by a non-zero exit, it failed; exit 0 completed.
// Killed by a signal, it crashed only if the signal says the program died
// abnormally (see crashSignal) and leasectl did not send it; any other
// signal (SIGPIPE, someone's SIGTERM) failed it. A child killed by the
// watchdog lost its lease: after the safety deadline passed (the watchdog
// acted on the same deadline before the loop did), or before, when the
// watchdog was too starved of CPU to learn of a later renewal in time.
// Call it once the watchdog was stopped, so that whether it fired is known.
func (r *run) outcome(exit Exit) leasestore.Outcome {
	switch {
	case r.stopping != ChildExited || exit.Signal == 0:
	case !r.s.Clock.Now().Before(r.deadline):
		r.stopping, r.detail = LeaseLost, "lease lost: "+r.noRenewal()
	case exit.Signal == syscall.SIGKILL && r.sent&(1<<uint(syscall.SIGKILL)) == 0 && r.watchdogFired():
		r.stopping, r.detail = LeaseLost, "lease lost: "+watchdogFiredEarly
	}
	out := leasestore.Outcome{
		ExitCode: exit.Code, Signal: int(exit.Signal),
		Duration: r.s.Clock.Now().Sub(r.startedAt), Reason: r.detail,
	}
	switch {
	case r.stopping != ChildExited:
		out.Result = leasestore.ResultFailed
	case exit.Signal == 0 && exit.Code == 0:
		out.Result = leasestore.ResultCompleted
	case exit.Signal == 0 || r.sent&(1<<uint(exit.Signal)) != 0 || !crashSignal(exit.Signal):
		out.Result = leasestore.ResultFailed
	default:
		out.Result = leasestore.ResultCrashed
		out.Reason = fmt.Sprintf("killed by %s, which leasectl did not send", signame.Name(exit.Signal))
	}
	return out
}

// crashSignal reports whether a child killed by sig, a signal leasectl did
// not send, crashed: the signals a program dies of when it faults (SIGSEGV,
// SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS), aborts (SIGABRT), or is killed
// by the kernel for what it consumed (SIGKILL from the OOM killer, SIGXCPU
// and SIGXFSZ past a resource limit). Every other signal is a request to
// stop from a person or a pipe (SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT,
// SIGUSR1, ...): the run failed, with its 128+N exit, and counts for no
// quarantine.
func crashSignal(sig syscall.Signal) bool {
	switch sig {
	case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGILL, syscall.SIGFPE, syscall.SIGTRAP, syscall.SIGSYS,
		syscall.SIGABRT, syscall.SIGKILL, syscall.SIGXCPU, syscall.SIGXFSZ:
		return true
	}
	return false
}

// watchdogFiredEarly is why a run whose watchdog killed the group before the
// supervisor's deadline lost its lease.
const watchdogFiredEarly = "the watchdog killed the process group: its safety deadline passed before it learned of a later renewal (the machine too busy for it to run in time?)"

// watchdogFired reports whether the run's watchdog killed the group at its
// deadline.
func (r *run) watchdogFired() bool {
	if r.wd == nil {
		return false
	}
	select {
	case <-r.wd.Fired():
		return true
	default:
		return false
	}
}

// watchdogDeath says why the watchdog's death ends the run.
func (r *run) watchdogDeath() string {
	if r.watchdogFired() {
		return "the watchdog killed the process group at its safety deadline"
	}
	return "the watchdog process died"
}

// lostBeforeStart says why the child could not start, if it was because the
// lease was lost first (the process group the child was to join is gone:
// the watchdog killed it at the deadline, or died), or "" when the command
// itself is to blame. It may wait, at most until the deadline, for the
// watchdog's death to be known.
func (r *run) lostBeforeStart(err error) string {
	if !r.s.Clock.Now().Before(r.deadline) {
		return fmt.Sprintf("the safety deadline (--safety %s) passed before the child started", r.cfg.Safety)
	}
	// Joining a process group that no longer exists fails with EPERM.
	if r.wd == nil || !errors.Is(err, syscall.EPERM) {
		return ""
	}
	t := r.s.Clock.NewTimer(r.deadline.Sub(r.s.Clock.Now()))
	defer t.Stop()
	select {
	case <-r.wd.Done():
		return "the watchdog died before the child started"
	case <-t.C():
		return fmt.Sprintf("the safety deadline (--safety %s) passed before the child started", r.cfg.Safety)
	}
}

// grantTooLate is the reason recorded for a grant that came after the
// safety window had passed.
const grantTooLate = "the grant arrived after the safety window"

// notStarted ends a run whose child never started: it stops the watchdog,
// if any, and releases the lease with nothing counted.
func (r *run) notStarted(exitCode int, reason string) {
	r.closeWatchdog()
	r.release(leasestore.Outcome{Result: leasestore.ResultNotStarted, ExitCode: exitCode, Reason: reason})
}

// releaseContext bounds the release by releaseTimeout on the run's clock.
func (r *run) releaseContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	bound := r.s.Clock.NewTimer(releaseTimeout)
	stop := make(chan struct{})
	go func() {
		select {
		case <-bound.C():
			cancel()
		case <-stop:
		}
	}()
	return ctx, func() {
		close(stop)
		bound.Stop()
		cancel()
	}
}

// release records the outcome, retrying a store that does not answer until
// releaseTimeout. A lease found lost already had its crash counted while
// the store could not hear from the run: the outcome is recorded late, to
// correct it. An outcome the store could not take in time is kept in the
// outbox. It reports whether the store took the outcome as the run's end,
// counting its crash if it crashed.
func (r *run) release(out leasestore.Outcome) (ended bool) {
	ctx, cancel := r.releaseContext()
	defer cancel()
	var cause error // the last failure that was not this deadline's doing
	for {
		err := r.s.Store.Release(ctx, r.lease, out)
		if err != nil && (cause == nil || !errors.Is(err, context.Canceled)) {
			cause = err
		}
		switch {
		case err == nil:
			r.log.Debug().Msg("lease released")
			return true
		case errors.Is(err, leasestore.ErrLeaseLost):
			return r.recordLate(ctx, out)
		case ctx.Err() != nil:
			r.keep(r.late(out), cause)
			return false
		}
		r.log.Warn().Err(err).Msg("release failed; retrying")
		t := r.s.Clock.NewTimer(r.s.retryAfter(r.cfg.Heartbeat))
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// late is the run's outcome out, as the store takes it late.
func (r *run) late(out leasestore.Outcome) leasestore.LateOutcome {
	return leasestore.LateOutcome{Job: r.lease.Job, Holder: r.lease.Holder, Token: r.lease.Token, Outcome: out}
}

// recordLate records the outcome of a run whose lease the store no longer
// has (its crash counted, its evidence expired), correcting what its
// absence did; or keeps it in the outbox if the store fails now. It
// reports whether the store released the run with it after all (its
// evidence was still there).
func (r *run) recordLate(ctx context.Context, out leasestore.Outcome) (released bool) {
	c, err := r.s.Store.RecordLate(ctx, r.late(out))
	if err != nil {
		r.keep(r.late(out), fmt.Errorf("the lease was gone at release, and recording the outcome late failed: %w", err))
		return false
	}
	r.log.Warn().Bool("crash_withdrawn", c.CrashWithdrawn).Bool("quarantine_lifted", c.QuarantineLifted).Int("crashes", c.Crashes).
		Msg("the lease was gone at release (counted as a crash while the store could not hear from this run?); outcome recorded late: " + c.String())
	return c.Released
}

// keep puts a late outcome, which the store could not take because of
// cause, in the outbox, for a later leasectl process on this host to
// deliver. It logs one line, naming cause.
func (s *Supervisor) keep(log zerolog.Logger, late leasestore.LateOutcome, cause error) {
	if s.Outbox == nil {
		log.Error().Err(cause).Msg("the outcome could not be recorded and is lost: the next run or scan will count this run as a crash")
		return
	}
	if err := s.Outbox.Put(late); err != nil {
		log.Error().Err(cause).AnErr("outbox_error", err).
			Msg("the outcome could not be recorded, nor kept in the outbox: the next run or scan will count this run as a crash")
		return
	}
	log.Warn().Err(cause).Str("outbox", s.Outbox.Dir()).
		Msg("the outcome could not be recorded; it is kept in the outbox: the next leasectl run or scan on this host for this store delivers it, and corrects the crash the store may count meanwhile")
}

func (r *run) keep(late leasestore.LateOutcome, cause error) { r.s.keep(r.log, late, cause) }
