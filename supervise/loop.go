package supervise

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/clock"
	"github.com/leasectl/leasectl/internal/signame"
	"github.com/leasectl/leasectl/leasestore"
)

// renewResult is a renewal's answer, with the time its request was sent.
type renewResult struct {
	sent time.Time
	err  error
	stop *leasestore.StopRequest // an operator asked the run to stop
}

// run is the state of one supervised child.
type run struct {
	s     *Supervisor
	cfg   Config
	lease *leasestore.Lease
	log   zerolog.Logger
	child Child
	wd    Watchdog
	// waitSub is the subscription a --wait run waited with, closed once
	// its child is forked.
	waitSub *waitSub

	deadline  time.Time // the last confirmed renewal's send time + safety
	renewing  bool
	renewDone chan renewResult
	renewErr  error // the last renewal's failure, if it failed
	rttWarned int   // how many of rttWarnings were said

	sent      uint64 // bit N: leasectl sent the group signal N; dying of it is not a crash
	wdReady   bool   // the watchdog ignores forwarded signals (or there is none)
	suspended bool   // stopped with the child by job control, until SIGCONT
	terms     int    // SIGINT/SIGTERM received
	stopping  Reason // LeaseLost, MaxRuntime or Stopped once decided; ChildExited otherwise
	detail    string // why, when stopping
	startedAt time.Time
}

// start starts the child under the lease acquired by the request sent at
// sent, in the watchdog's group, and supervises it until it ends. A run
// whose child could not start, or should no longer, is released as not
// started.
func (r *run) start(sent time.Time) (Ending, error) {
	clk := r.s.Clock
	r.deadline = sent.Add(r.cfg.Safety)
	r.lease.RTT = clk.Now().Sub(sent) // the acquire's, until a renewal's
	wd, err := r.s.Watchdog.wait()
	if err != nil {
		r.notStarted(-1, "watchdog failed to start")
		return Ending{}, fmt.Errorf("starting the watchdog: %w", err)
	}
	r.wd = wd
	if !clk.Now().Before(r.deadline) {
		r.notStarted(-1, grantTooLate)
		return Ending{}, &leasestore.UnavailableError{Op: "acquire", Err: fmt.Errorf("the store took longer than --safety %s to grant the lease", r.cfg.Safety)}
	}
	r.tellWatchdog(func() error { return wd.SetToken(r.lease.Token) })
	r.tellWatchdog(func() error { return wd.SetDeadline(r.deadline.Sub(clk.Now())) })
	select {
	case sig := <-r.s.Signals:
		if ss, ok := sig.(syscall.Signal); ok && endsWait(ss) {
			r.log.Info().Str("signal", ss.String()).Msg("signal before the child started: nothing started")
			r.notStarted(-1, "interrupted by "+ss.String())
			return Ending{Reason: Interrupted, Signal: ss, Lease: r.lease, Detail: "interrupted before the child started"}, nil
		}
	default:
	}
	pgid := 0
	if wd != nil {
		pgid = wd.Group()
		r.noteGroup(pgid)
	}
	r.startedAt = clk.Now()
	child, err := r.s.Start(r.env(), pgid)
	r.waitSub.closeAside()
	if err != nil {
		if why := r.lostBeforeStart(err); why != "" {
			r.log.Error().Err(err).Msg("lease lost before the child started: " + why)
			r.notStarted(-1, "lease lost: "+why)
			return Ending{Reason: LeaseLost, Lease: r.lease, Detail: "lease lost: " + why}, nil
		}
		var se *StartError
		if !errors.As(err, &se) {
			se = &StartError{Code: 126, Err: err}
		}
		// The caller says it in the shell's words; this is for debugging.
		r.log.Debug().Err(err).Int("exit_code", se.Code).Msg("the command could not be started")
		r.notStarted(se.Code, se.Error())
		return Ending{Reason: NotStarted, Start: se, Lease: r.lease, Detail: se.Error()}, nil
	}
	r.child = child
	// One line for the grant and the start: each line written costs a run
	// measurably (a write to a pipe someone must drain).
	r.log.Info().Int64("attempt", r.lease.Attempt).Int("pid", child.PID()).Strs("command", r.cfg.Command).
		Msg("lease acquired; child started")
	return r.loop(), nil
}

// noteGroup tells a store whose holders share this host the process group
// the child is about to join, so that once the run's processes are all
// gone the next run need not wait out its lease. Without the note the
// lease only expires later: a failure is no reason not to run.
func (r *run) noteGroup(pgid int) {
	if err := r.s.Store.NoteGroup(r.lease, pgid); err != nil {
		r.log.Warn().Err(err).Msg("cannot note the child's process group: if this run dies, the next waits out its --ttl")
	}
}

// loop is the child's whole life: one select over its exit, the renewals,
// the safety deadline, the operator's signals and the time limits.
func (r *run) loop() Ending {
	clk := r.s.Clock
	r.renewDone = make(chan renewResult, 1)
	var graceT, maxT clock.Timer
	if r.cfg.MaxRuntime > 0 {
		maxT = clk.NewTimer(r.cfg.MaxRuntime)
		defer maxT.Stop()
	}
	deadlineT := clk.NewTimer(r.deadline.Sub(clk.Now()))
	defer deadlineT.Stop()
	// The first renewal is due a heartbeat after the acquire was sent, as
	// every later one is after its predecessor: the watchdog's and the
	// child's start-up must not eat into the safety margin.
	beatT := clk.NewTimer(r.deadline.Add(r.cfg.Heartbeat - r.cfg.Safety).Sub(clk.Now()))
	defer beatT.Stop()
	var watchdogDied, watchdogReady <-chan struct{}
	if r.wd != nil {
		watchdogDied, watchdogReady = r.wd.Done(), r.wd.Ready()
	} else {
		r.wdReady = true
	}
	for {
		select {
		case exit := <-r.child.Done():
			// Nothing of the run's life is timed any more while it ends.
			for _, t := range []clock.Timer{graceT, maxT, deadlineT, beatT} {
				stopTimer(t)
			}
			return r.finish(exit)

		case res := <-r.renewDone:
			r.renewing = false
			if r.stopping == LeaseLost {
				continue
			}
			switch {
			case res.err == nil && !clk.Now().Before(r.deadline):
				// Confirmed, but only after the deadline passed: the
				// watchdog has acted on it already.
				r.lose(r.noRenewal())
			case res.err == nil:
				r.renewErr = nil
				if d := res.sent.Add(r.cfg.Safety); d.After(r.deadline) {
					r.deadline = d
					deadlineT.Reset(d.Sub(clk.Now()))
					r.tellWatchdog(func() error { return r.wd.SetDeadline(d.Sub(clk.Now())) })
				}
				beatT.Reset(res.sent.Add(r.cfg.Heartbeat).Sub(clk.Now()))
				r.roundTrip(clk.Now().Sub(res.sent))
				if res.stop != nil && r.stopping == ChildExited {
					r.stopping, r.detail = Stopped, res.stop.Detail()
					r.log.Warn().Str("by", res.stop.By).Str("reason", res.stop.Reason).Dur("grace", r.cfg.Grace).
						Msg(r.detail + "; stopping the child")
					r.signal(syscall.SIGTERM)
					graceT = r.armGrace(graceT)
				}
			case errors.Is(res.err, leasestore.ErrLeaseLost):
				r.lose("the store says the lease is no longer ours")
			default:
				if r.renewErr == nil || !errors.Is(res.err, context.DeadlineExceeded) {
					r.renewErr = res.err
				}
				left := r.deadline.Sub(clk.Now())
				r.log.Warn().Err(res.err).Dur("left", left).Msg("renewal failed; retrying until the safety deadline")
				beatT.Reset(r.s.retryAfter(r.cfg.Heartbeat))
			}

		case sig := <-r.child.Stopped():
			r.suspend(sig)

		case <-beatT.C():
			if !r.renewing && r.stopping != LeaseLost {
				r.renew()
			}

		case <-deadlineT.C():
			if r.stopping != LeaseLost {
				r.lose(r.noRenewal())
			}

		case <-watchdogReady:
			watchdogReady = nil
			r.wdReady = true

		case <-watchdogDied:
			watchdogDied = nil
			if r.stopping != LeaseLost && r.sent&(1<<uint(syscall.SIGKILL)) == 0 {
				// Killed by the OOM killer or an operator, or it killed the
				// group at the deadline: either way nothing guards the
				// group any more if this process stalls. (A SIGKILL this
				// loop sent to the group takes the watchdog with it.)
				r.lose(r.watchdogDeath())
			}

		case <-timerC(maxT):
			r.log.Warn().Dur("max_runtime", r.cfg.MaxRuntime).Msg("--max-runtime passed; stopping the child")
			if r.stopping == ChildExited {
				r.stopping, r.detail = MaxRuntime, fmt.Sprintf("--max-runtime %s passed", r.cfg.MaxRuntime)
			}
			r.signal(syscall.SIGTERM)
			graceT = r.armGrace(graceT)

		case <-timerC(graceT):
			r.log.Warn().Dur("grace", r.cfg.Grace).Msg("grace period over; killing the process group")
			r.signal(syscall.SIGKILL)

		case sig := <-r.s.Signals:
			ss, ok := sig.(syscall.Signal)
			if !ok {
				continue
			}
			if ss == syscall.SIGCONT {
				r.resume()
				continue
			}
			r.log.Info().Str("signal", ss.String()).Msg("forwarding signal to the child's process group")
			if ss != syscall.SIGINT && ss != syscall.SIGTERM {
				r.signal(ss)
				continue
			}
			r.terms++
			if r.terms > 1 {
				r.log.Warn().Msg("second interrupt; killing the process group now")
				r.signal(syscall.SIGKILL)
				continue
			}
			r.signal(ss)
			graceT = r.armGrace(graceT)
		}
	}
}

// suspend follows a job-control stop of the child (Ctrl-Z): the supervisor
// stops too, so that the shell that started it gets the terminal back, as
// it would with the child alone. Nothing renews the lease while stopped:
// the watchdog kills the group at the deadline unless `fg` or `bg` resumes
// the run first, which then ends as lease lost.
func (r *run) suspend(sig syscall.Signal) {
	if r.s.Suspend == nil || r.stopping == LeaseLost {
		return
	}
	// The stop reached the whole group; the watchdog ignores it, unless it
	// came before the watchdog could (its first milliseconds).
	r.tellWatchdog(func() error { return r.wd.Continue() })
	left := r.deadline.Sub(r.s.Clock.Now()).Round(100 * time.Millisecond)
	r.log.Warn().Str("signal", signame.Name(sig)).Dur("left", left).
		Msgf("stopped by %s: nothing renews the lease while stopped, so the child is killed unless the run is resumed (fg) within %s", signame.Name(sig), left)
	r.suspended = true
	r.s.Suspend(sig)
}

// resume continues the child once SIGCONT resumed a suspended supervisor.
func (r *run) resume() {
	if !r.suspended {
		return
	}
	r.suspended = false
	if r.stopping == LeaseLost {
		return // killed already
	}
	if !r.s.Clock.Now().Before(r.deadline) {
		// Resumed too late: the lease may be someone else's by now, so
		// the child must not run another instruction (the watchdog has
		// killed it, unless it could not).
		r.lose(fmt.Sprintf("no renewal confirmed within --safety %s while stopped", r.cfg.Safety))
		return
	}
	r.log.Info().Msg("resumed; resuming the child")
	if err := r.child.Continue(); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.log.Error().Err(err).Msg("resuming the child's process group failed")
	}
}

// renew sends one renewal in the background, bounded by the time left in the
// safety window.
func (r *run) renew() {
	sent := r.s.Clock.Now()
	ctx, cancel := context.WithTimeout(context.Background(), r.deadline.Sub(sent))
	r.renewing = true
	l := *r.lease // with the last round trip; the loop may set the next meanwhile
	go func() {
		err := r.s.Store.Renew(ctx, &l)
		cancel()
		r.renewDone <- renewResult{sent: sent, err: err, stop: l.Stop}
	}()
}

// noRenewal says why the lease is lost when no renewal was confirmed in
// time, naming the last renewal's failure: the cause, not the deadline that
// cut the last attempt short.
func (r *run) noRenewal() string {
	why := fmt.Sprintf("no renewal confirmed within --safety %s", r.cfg.Safety)
	if r.renewErr != nil {
		why += fmt.Sprintf(" (the last renewal failed: %v)", r.renewErr)
	}
	return why
}

// lose kills the group at once: the lease can no longer be trusted.
func (r *run) lose(why string) {
	r.stopping, r.detail = LeaseLost, "lease lost: "+why
	r.log.Error().Str("reason", why).Msg("lease lost: " + why + "; killing the child's process group")
	r.signal(syscall.SIGKILL)
}

func (r *run) armGrace(t clock.Timer) clock.Timer {
	if t != nil {
		return t
	}
	return r.s.Clock.NewTimer(r.cfg.Grace)
}

func (r *run) signal(sig syscall.Signal) {
	r.sent |= 1 << uint(sig)
	send := r.child.Signal
	if !r.wdReady && sig != syscall.SIGKILL {
		// The watchdog, a member of the group, does not ignore the
		// operator's signals yet: in these first milliseconds they go to
		// the child alone.
		send = r.child.SignalProcess
	}
	if err := send(sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.log.Error().Err(err).Str("signal", sig.String()).Msg("signalling the child's process group failed")
	}
}

// env is what the child's environment gains.
func (r *run) env() []string {
	return []string{
		"LEASECTL_JOB_ID=" + r.cfg.Job,
		"LEASECTL_FENCING_TOKEN=" + strconv.FormatInt(r.lease.Token, 10),
		"LEASECTL_SLOT=" + strconv.Itoa(r.lease.Slot),
		"LEASECTL_WORKER_ID=" + r.cfg.WorkerID,
		"LEASECTL_ATTEMPT=" + strconv.FormatInt(r.lease.Attempt, 10),
		"LEASECTL_LEASE_TTL_MS=" + strconv.FormatInt(r.cfg.TTL.Milliseconds(), 10),
	}
}

func timerC(t clock.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

func stopTimer(t clock.Timer) {
	if t != nil {
		t.Stop()
	}
}
