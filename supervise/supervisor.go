package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/leasestore"
)

const (
	// waitMargin is added to a holder's remaining TTL before trying again,
	// so the retry lands after the expiry rather than a hair before it.
	waitMargin = 5 * time.Millisecond
	// minRetry and maxRetry bound how quickly a failed renewal is retried:
	// quick enough to get several tries into the safety window, slow enough
	// not to hammer a store that is struggling.
	minRetry = 10 * time.Millisecond
	maxRetry = time.Second
	// releaseTimeout bounds the release after the child ended. If the store
	// does not answer in time, the evidence stays and scan counts the run as
	// a crash: the lease is never left half-released.
	releaseTimeout = 5 * time.Second
)

// Supervisor runs commands under leases. Its fields are its dependencies, so
// tests can give it a fake store, clock, child and watchdog.
type Supervisor struct {
	// Store holds the leases.
	Store leasestore.Store
	// Clock times the heartbeat, the safety deadline and the limits.
	Clock Clock
	// Log gets every line of the run, with job, worker and token added.
	Log zerolog.Logger
	// Start starts the command with env added to its environment, in
	// process group pgid (the watchdog's), or in a new group of its own when
	// pgid is 0. A command that cannot start returns *StartError.
	Start func(env []string, pgid int) (Child, error)
	// Watchdog starts the watchdog process; nil runs without one.
	Watchdog func() (Watchdog, error)
	// Signals delivers the operator's signals to forward (SIGINT, SIGTERM,
	// SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2).
	Signals <-chan os.Signal
	// OnWait, if set, is called each time a --wait attempt finds the job
	// held, to show who holds it.
	OnWait func(*leasestore.HeldError)
	// KillOrphans, if set, kills descendants that left the child's group
	// (reparented to this process as a child subreaper). It runs after the
	// watchdog was stopped, so every child left is an orphan.
	KillOrphans func()
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
)

// Ending is how a run ended once the wait for the lease was over.
type Ending struct {
	Reason Reason
	Exit   Exit           // the child's exit (ChildExited, LeaseLost, MaxRuntime)
	Start  *StartError    // NotStarted: why
	Signal syscall.Signal // Interrupted: the signal
	Lease  *leasestore.Lease
	Detail string // human words for the log and the store's history
}

// WaitTimeoutError is returned when --wait-timeout passed while another
// worker held the lease. It unwraps to the last *leasestore.HeldError.
type WaitTimeoutError struct {
	Waited time.Duration
	Held   *leasestore.HeldError
}

// Error says how long it waited and who holds the job.
func (e *WaitTimeoutError) Error() string {
	return fmt.Sprintf("gave up after waiting %s: %v", e.Waited.Round(time.Millisecond), e.Held)
}

// Unwrap returns the HeldError.
func (e *WaitTimeoutError) Unwrap() error { return e.Held }

// Run acquires the lease for cfg.Job (waiting for it with cfg.Wait), runs
// the command under it, and releases it with the outcome. It returns an
// error when no lease was acquired (held, quarantined, too soon, store
// unavailable, wait timeout); otherwise the Ending says how the run ended.
// ctx bounds the wait and the store calls made before the child starts; a
// started child is supervised until it exits, whatever ctx does.
func (s *Supervisor) Run(ctx context.Context, cfg Config) (Ending, error) {
	log := s.Log.With().Str("job", cfg.Job).Str("worker", cfg.WorkerID).Logger()
	// The watchdog process starts while the lease is being acquired: its
	// fork and exec cost as much as the acquire, and need not wait for it.
	// It guards nothing until it is told the child's group.
	watchdog := s.startWatchdog()
	lease, sent, ending, err := s.acquire(ctx, cfg, log)
	if err != nil || lease == nil {
		if wd, _ := (<-watchdog).get(); wd != nil {
			_ = wd.Close()
		}
		return ending, err
	}
	r := &run{
		s:     s,
		cfg:   cfg,
		lease: lease,
		log:   log.With().Int64("token", lease.Token).Logger(),
	}
	return r.supervise(sent, watchdog)
}

// startedWatchdog is the outcome of starting the watchdog.
type startedWatchdog struct {
	wd  Watchdog
	err error
}

func (w startedWatchdog) get() (Watchdog, error) { return w.wd, w.err }

// startWatchdog starts the watchdog in the background; the channel delivers
// it, or a nil Watchdog when the Supervisor has none.
func (s *Supervisor) startWatchdog() <-chan startedWatchdog {
	c := make(chan startedWatchdog, 1)
	if s.Watchdog == nil {
		c <- startedWatchdog{}
		return c
	}
	go func() {
		wd, err := s.Watchdog()
		c <- startedWatchdog{wd, err}
	}()
	return c
}

// acquire gets the lease, waiting for it with cfg.Wait. It returns the lease
// and the time the successful request was sent, or an Ending (Interrupted) or
// an error.
func (s *Supervisor) acquire(ctx context.Context, cfg Config, log zerolog.Logger) (*leasestore.Lease, time.Time, Ending, error) {
	req := leasestore.AcquireRequest{
		Job: cfg.Job, Holder: cfg.WorkerID, Host: cfg.Host, PID: cfg.PID, Command: cfg.Command,
		TTL: cfg.TTL, EvidenceTTL: cfg.EvidenceTTL, MaxCrashes: cfg.MaxCrashes, MinInterval: cfg.MinInterval,
	}
	var released <-chan struct{}
	if cfg.Wait {
		// Subscribe before the first attempt: a release between a refused
		// attempt and the subscription would otherwise be missed.
		sub, err := s.Store.Subscribe(ctx, cfg.Job)
		if err != nil {
			return nil, time.Time{}, Ending{}, err
		}
		defer sub.Close()
		released = sub.Released()
	}
	var timeout <-chan time.Time
	var held *leasestore.HeldError // the last refusal, once waiting
	started := s.Clock.Now()
	if cfg.WaitTimeout > 0 {
		t := s.Clock.NewTimer(cfg.WaitTimeout)
		defer t.Stop()
		timeout = t.C()
	}
	for {
		sent := s.Clock.Now()
		// A grant that arrives after the safety window is useless (the child
		// could not start before its deadline), so that bounds the call.
		actx, cancel := context.WithTimeout(ctx, cfg.Safety)
		lease, err := s.Store.Acquire(actx, req)
		cancel()
		if err == nil {
			if c := lease.Recovered; c != nil {
				log.Warn().Str("crashed_worker", c.Holder).Str("crashed_host", c.Host).Int("crashes", c.Crashes).
					Msg("counted the previous run's crash: its supervisor vanished")
			}
			return lease, sent, Ending{}, nil
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			s.releaseUnanswered(cfg, log)
			err = &leasestore.UnavailableError{Op: "acquire", Err: fmt.Errorf("no answer within --safety %s", cfg.Safety)}
		}
		var wake time.Duration
		var h *leasestore.HeldError
		switch {
		case cfg.Wait && errors.As(err, &h):
			held = h
			if s.OnWait != nil {
				s.OnWait(held)
			}
			log.Debug().Str("holder", held.Holder).Dur("expires_in", held.ExpiresIn).Msg("lease held; waiting")
			wake = held.ExpiresIn + waitMargin
		case held != nil && errors.Is(err, leasestore.ErrUnavailable):
			// Already waiting: a store that fails for a while (a restart, a
			// failover) does not end the wait; --wait-timeout still does.
			log.Warn().Err(err).Msg("the store failed while waiting for the lease; trying again")
			wake = retryDelay(cfg.Heartbeat)
		default:
			return nil, time.Time{}, Ending{}, err
		}
		retry := s.Clock.NewTimer(wake)
		select {
		case <-released:
		case <-retry.C():
		case <-timeout:
			retry.Stop()
			return nil, time.Time{}, Ending{}, &WaitTimeoutError{Waited: s.Clock.Now().Sub(started), Held: held}
		case sig := <-s.Signals:
			retry.Stop()
			if ss, ok := sig.(syscall.Signal); ok && endsWait(ss) {
				log.Info().Str("signal", ss.String()).Msg("signal while waiting for the lease: nothing held, nothing started")
				return nil, time.Time{}, Ending{Reason: Interrupted, Signal: ss, Detail: "interrupted while waiting"}, nil
			}
		case <-ctx.Done():
			retry.Stop()
			return nil, time.Time{}, Ending{}, ctx.Err()
		}
		retry.Stop()
	}
}

// releaseUnanswered cleans up after an acquire whose answer did not come in
// time: the store may have granted it all the same, and a lease nobody
// releases would be counted as a crash once it expired. If the job's holder
// is this run's worker, its lease is released as not started. Best effort,
// bounded like every release.
func (s *Supervisor) releaseUnanswered(cfg Config, log zerolog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	st, err := s.Store.Status(ctx, cfg.Job)
	if err != nil || st.Holder == nil || st.Holder.Worker != cfg.WorkerID {
		return
	}
	l := &leasestore.Lease{Job: cfg.Job, Holder: cfg.WorkerID, Token: st.Holder.Token, TTL: cfg.TTL}
	out := leasestore.Outcome{Result: leasestore.ResultNotStarted, ExitCode: -1, Reason: grantTooLate}
	if err := s.Store.Release(ctx, l, out); err == nil {
		log.Warn().Int64("token", l.Token).Msg("released a lease the store granted after leasectl gave up waiting for it")
	}
}

// endsWait reports whether sig, received while waiting for the lease, ends
// the wait (the signals whose default action is to terminate a process; the
// user signals are ignored while nothing runs).
func endsWait(sig syscall.Signal) bool {
	return sig == syscall.SIGINT || sig == syscall.SIGTERM || sig == syscall.SIGHUP || sig == syscall.SIGQUIT
}

type renewResult struct {
	sent time.Time
	err  error
}

// run is the state of one supervised child.
type run struct {
	s     *Supervisor
	cfg   Config
	lease *leasestore.Lease
	log   zerolog.Logger
	child Child
	wd    Watchdog

	deadline  time.Time // the last confirmed renewal's send time + safety
	renewing  bool
	renewDone chan renewResult

	sent      uint64 // bit N: leasectl sent the group signal N; dying of it is not a crash
	wdReady   bool   // the watchdog ignores forwarded signals (or there is none)
	terms     int    // SIGINT/SIGTERM received
	stopping  Reason // LeaseLost or MaxRuntime once decided; ChildExited otherwise
	detail    string // why, when stopping
	startedAt time.Time
}

func (r *run) supervise(sent time.Time, watchdog <-chan startedWatchdog) (Ending, error) {
	clock := r.s.Clock
	r.deadline = sent.Add(r.cfg.Safety)
	wd, err := (<-watchdog).get()
	if err != nil {
		r.notStarted(-1, "watchdog failed to start")
		return Ending{}, fmt.Errorf("starting the watchdog: %w", err)
	}
	r.wd = wd
	if !clock.Now().Before(r.deadline) {
		r.notStarted(-1, grantTooLate)
		return Ending{}, &leasestore.UnavailableError{Op: "acquire", Err: fmt.Errorf("the store took longer than --safety %s to grant the lease", r.cfg.Safety)}
	}
	r.tellWatchdog(func() error { return wd.SetDeadline(r.deadline.Sub(clock.Now())) })
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
	}
	r.startedAt = clock.Now()
	child, err := r.s.Start(r.env(), pgid)
	if err != nil {
		var se *StartError
		if !errors.As(err, &se) {
			se = &StartError{Code: 126, Err: err}
		}
		r.log.Error().Err(err).Int("exit_code", se.Code).Msg("the command could not be started")
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

// loop is the child's whole life: one select over its exit, the renewals,
// the safety deadline, the operator's signals and the time limits.
func (r *run) loop() Ending {
	clock := r.s.Clock
	r.renewDone = make(chan renewResult, 1)
	var graceT, maxT Timer
	if r.cfg.MaxRuntime > 0 {
		maxT = clock.NewTimer(r.cfg.MaxRuntime)
		defer maxT.Stop()
	}
	deadlineT := clock.NewTimer(r.deadline.Sub(clock.Now()))
	defer deadlineT.Stop()
	// The first renewal is due a heartbeat after the acquire was sent, as
	// every later one is after its predecessor: the watchdog's and the
	// child's start-up must not eat into the safety margin.
	beatT := clock.NewTimer(r.deadline.Add(r.cfg.Heartbeat - r.cfg.Safety).Sub(clock.Now()))
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
			stopTimer(graceT)
			return r.finish(exit)

		case res := <-r.renewDone:
			r.renewing = false
			if r.stopping == LeaseLost {
				continue
			}
			switch {
			case res.err == nil && !clock.Now().Before(r.deadline):
				// Confirmed, but only after the deadline passed: the
				// watchdog has acted on it already.
				r.lose(fmt.Sprintf("no renewal confirmed within --safety %s", r.cfg.Safety))
			case res.err == nil:
				if d := res.sent.Add(r.cfg.Safety); d.After(r.deadline) {
					r.deadline = d
					deadlineT.Reset(d.Sub(clock.Now()))
					r.tellWatchdog(func() error { return r.wd.SetDeadline(d.Sub(clock.Now())) })
				}
				beatT.Reset(res.sent.Add(r.cfg.Heartbeat).Sub(clock.Now()))
			case errors.Is(res.err, leasestore.ErrLeaseLost):
				r.lose("the store says the lease is no longer ours")
			default:
				left := r.deadline.Sub(clock.Now())
				r.log.Warn().Err(res.err).Dur("left", left).Msg("renewal failed; retrying until the safety deadline")
				beatT.Reset(retryDelay(r.cfg.Heartbeat))
			}

		case <-beatT.C():
			if !r.renewing && r.stopping != LeaseLost {
				r.renew()
			}

		case <-deadlineT.C():
			if r.stopping != LeaseLost {
				r.lose(fmt.Sprintf("no renewal confirmed within --safety %s", r.cfg.Safety))
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
				r.lose("the watchdog process died")
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

// renew sends one renewal in the background, bounded by the time left in the
// safety window.
func (r *run) renew() {
	sent := r.s.Clock.Now()
	ctx, cancel := context.WithTimeout(context.Background(), r.deadline.Sub(sent))
	r.renewing = true
	go func() {
		err := r.s.Store.Renew(ctx, r.lease)
		cancel()
		r.renewDone <- renewResult{sent: sent, err: err}
	}()
}

// lose kills the group at once: the lease can no longer be trusted.
func (r *run) lose(why string) {
	r.stopping, r.detail = LeaseLost, "lease lost: "+why
	r.log.Error().Str("reason", why).Msg("lease lost; killing the child's process group")
	r.signal(syscall.SIGKILL)
}

func (r *run) armGrace(t Timer) Timer {
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

// finish ends the run after the direct child exited: it kills what is left of
// the group and the orphans, stops the watchdog and releases with the outcome.
func (r *run) finish(exit Exit) Ending {
	if err := r.child.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.log.Error().Err(err).Msg("killing what is left of the process group failed")
	}
	r.closeWatchdog()
	if r.s.KillOrphans != nil {
		r.s.KillOrphans()
	}
	if r.stopping == ChildExited && exit.Signal != 0 && !r.s.Clock.Now().Before(r.deadline) {
		// Killed after the safety deadline passed: by the watchdog, which
		// acted on the same deadline before this loop did.
		r.stopping, r.detail = LeaseLost, fmt.Sprintf("lease lost: no renewal confirmed within --safety %s", r.cfg.Safety)
	}
	ending := Ending{Reason: r.stopping, Exit: exit, Lease: r.lease}
	out := leasestore.Outcome{
		ExitCode: exit.Code, Signal: int(exit.Signal),
		Duration: r.s.Clock.Now().Sub(r.startedAt), Reason: r.detail,
	}
	switch {
	case r.stopping != ChildExited:
		out.Result = leasestore.ResultFailed
	case exit.Signal == 0 && exit.Code == 0:
		out.Result = leasestore.ResultCompleted
	case exit.Signal == 0 || r.sent&(1<<uint(exit.Signal)) != 0 || r.operatorKeyboard(exit.Signal):
		out.Result = leasestore.ResultFailed
	default:
		out.Result = leasestore.ResultCrashed
		out.Reason = fmt.Sprintf("killed by %s, which leasectl did not send", exit.Signal)
	}
	ending.Detail = string(out.Result) + " " + exit.String()
	if out.Reason != "" {
		ending.Detail += ": " + out.Reason
	}
	ev := r.log.Info()
	if out.Result != leasestore.ResultCompleted {
		ev = r.log.Warn()
	}
	ev.Str("outcome", string(out.Result)).Int("exit_code", exit.ExitCode()).Dur("duration", out.Duration).
		Str("reason", out.Reason).Msg("child ended")
	r.release(out)
	return ending
}

// operatorKeyboard reports whether sig is one a terminal sends its
// foreground group (Ctrl-C, Ctrl-\): an interactive child that dies of it was
// stopped by the operator, not crashed.
func (r *run) operatorKeyboard(sig syscall.Signal) bool {
	return r.cfg.Interactive && (sig == syscall.SIGINT || sig == syscall.SIGQUIT)
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

// release records the outcome, retrying a store that does not answer until
// releaseTimeout. A lease already lost is logged, not retried.
func (r *run) release(out leasestore.Outcome) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		err := r.s.Store.Release(ctx, r.lease, out)
		switch {
		case err == nil:
			r.log.Debug().Msg("lease released")
			return
		case errors.Is(err, leasestore.ErrLeaseLost):
			if attempt == 1 {
				r.log.Warn().Msg("lease already lost at release; outcome not recorded")
			}
			return
		case ctx.Err() != nil:
			r.log.Error().Err(err).Msg("release failed; the run's evidence stays and scan will count it as a crash")
			return
		}
		r.log.Warn().Err(err).Msg("release failed; retrying")
		t := r.s.Clock.NewTimer(retryDelay(r.cfg.Heartbeat))
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
		}
	}
}

func (r *run) tellWatchdog(f func() error) {
	if r.wd == nil {
		return
	}
	if err := f(); err != nil {
		r.log.Warn().Err(err).Msg("the watchdog is unreachable; the supervisor's own deadline still applies")
	}
}

func (r *run) closeWatchdog() {
	if r.wd != nil {
		r.tellWatchdog(r.wd.Close)
	}
}

// env is what the child's environment gains.
func (r *run) env() []string {
	return []string{
		"LEASECTL_JOB_ID=" + r.cfg.Job,
		"LEASECTL_FENCING_TOKEN=" + strconv.FormatInt(r.lease.Token, 10),
		"LEASECTL_WORKER_ID=" + r.cfg.WorkerID,
		"LEASECTL_ATTEMPT=" + strconv.FormatInt(r.lease.Attempt, 10),
		"LEASECTL_LEASE_TTL_MS=" + strconv.FormatInt(r.cfg.TTL.Milliseconds(), 10),
	}
}

// retryDelay is how long to wait before retrying a failed store call.
func retryDelay(heartbeat time.Duration) time.Duration {
	return min(max(heartbeat/5, minRetry), maxRetry)
}

func timerC(t Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

func stopTimer(t Timer) {
	if t != nil {
		t.Stop()
	}
}
