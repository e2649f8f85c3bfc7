package supervise

import (
	"context"
	"errors"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

func TestRenewOKMovesTheDeadline(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	t0 := h.clock.Now()
	c := h.waitStarted()
	for _, want := range []string{"LEASECTL_JOB_ID=nightly", "LEASECTL_FENCING_TOKEN=10", "LEASECTL_WORKER_ID=w1", "LEASECTL_ATTEMPT=1", "LEASECTL_LEASE_TTL_MS=3000"} {
		if !slices.Contains(c.env, want) {
			t.Errorf("child environment lacks %s: %v", want, c.env)
		}
	}
	if left := <-h.wd.updates; left != testSafety {
		t.Errorf("watchdog's first deadline is %s from the start, want --safety %s", left, testSafety)
	}

	h.clock.Advance(testHeartbeat)
	if r := h.renewOK(); !r.at.Equal(t0.Add(testHeartbeat)) {
		t.Errorf("renewal sent at %s, want one heartbeat after the grant", r.at.Sub(t0))
	}
	// The first deadline (t0+safety) passes: the renewal sent at t0+1s moved
	// it to t0+2.5s, so nothing is killed.
	h.clock.Advance(testSafety - testHeartbeat + 100*time.Millisecond)
	h.barrier()
	if got := c.received(); len(got) != 0 {
		t.Fatalf("group received %v before the moved deadline", got)
	}
	ending, out := h.end(Exit{Code: 0})
	if ending.Reason != ChildExited || ending.Exit.ExitCode() != 0 {
		t.Errorf("ending = %+v, want ChildExited with code 0", ending)
	}
	if out.Result != leasestore.ResultCompleted || out.ExitCode != 0 {
		t.Errorf("released outcome %+v, want completed exit 0", out)
	}
	if got := c.received(); len(got) != 1 || got[0].sig != syscall.SIGKILL {
		t.Errorf("after the child exited, its group got %v, want one SIGKILL for what is left", got)
	}
	if c.pgid != h.wd.Group() || !h.wd.closed {
		t.Errorf("child started in group %d, watchdog closed %v; want the watchdog's group %d, closed", c.pgid, h.wd.closed, h.wd.Group())
	}
}

func TestRenewLostKillsAtOnce(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	c := h.waitStarted()
	h.clock.Advance(testHeartbeat)
	r := h.nextRenew()
	r.reply <- leasestore.ErrLeaseLost
	if got := c.next(t); got.sig != syscall.SIGKILL || !got.at.Equal(r.at) {
		t.Fatalf("group received %v, want SIGKILL at the moment the store said not the holder (%s)", got, r.at)
	}
	ending, out := h.end(Exit{Code: -1, Signal: syscall.SIGKILL})
	if ending.Reason != LeaseLost {
		t.Errorf("ending reason %v, want LeaseLost", ending.Reason)
	}
	if out.Result != leasestore.ResultFailed || !strings.Contains(out.Reason, "lease lost") {
		t.Errorf("released outcome %+v, want failed with a lease-lost reason", out)
	}
}

func TestRenewErrorsRetryUntilTheDeadline(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	t0 := h.clock.Now()
	c := h.waitStarted()
	<-h.wd.updates
	unavailable := &leasestore.UnavailableError{Op: "renew", Err: errors.New("connection refused")}
	h.clock.Advance(testHeartbeat)
	h.nextRenew().reply <- unavailable
	retries := 0
	for {
		h.clock.awaitTimer(t, h.clock.Now().Add(retryDelay(testHeartbeat)))
		if len(c.received()) != 0 {
			t.Fatalf("killed at %s, before the deadline", h.clock.Now().Sub(t0))
		}
		// Step to the next retry, or to the deadline if that comes first.
		h.clock.Advance(min(retryDelay(testHeartbeat), t0.Add(testSafety).Sub(h.clock.Now())))
		if !h.clock.Now().Before(t0.Add(testSafety)) {
			break
		}
		h.nextRenew().reply <- unavailable
		retries++
	}
	if retries < 1 {
		t.Errorf("no retry within the safety window")
	}
	h.barrier()
	got := c.received()
	if len(got) != 1 || got[0].sig != syscall.SIGKILL || !got[0].at.Equal(t0.Add(testSafety)) {
		t.Fatalf("group received %v, want one SIGKILL exactly at grant + safety (%s)", got, t0.Add(testSafety))
	}
	// A renewal the store confirms after the deadline changes nothing.
	ending, _ := h.end(Exit{Code: -1, Signal: syscall.SIGKILL})
	if ending.Reason != LeaseLost {
		t.Errorf("ending reason %v, want LeaseLost", ending.Reason)
	}
}

func TestHangingRenewalDoesNotDelayTheKill(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	t0 := h.clock.Now()
	c := h.waitStarted()
	h.clock.Advance(testHeartbeat)
	hung := h.nextRenew() // never answered in time
	h.clock.Advance(testSafety - testHeartbeat - time.Millisecond)
	h.barrier()
	if got := c.received(); len(got) != 0 {
		t.Fatalf("group received %v a millisecond before the deadline", got)
	}
	h.clock.Advance(time.Millisecond)
	h.barrier()
	got := c.received()
	if len(got) != 1 || got[0].sig != syscall.SIGKILL || !got[0].at.Equal(t0.Add(testSafety)) {
		t.Fatalf("group received %v, want SIGKILL at grant + safety while the renewal hangs", got)
	}
	// The hung call finally succeeds: too late, the run stays lost.
	hung.reply <- nil
	ending, out := h.end(Exit{Code: -1, Signal: syscall.SIGKILL})
	if ending.Reason != LeaseLost || out.Result != leasestore.ResultFailed {
		t.Errorf("ending %v outcome %+v, want LeaseLost and failed", ending.Reason, out)
	}
}

func TestSignalDuringGraceKeepsRenewingThenKills(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	t0 := h.clock.Now()
	c := h.waitStarted()
	<-h.wd.updates
	h.signals <- syscall.SIGTERM
	h.barrier()
	if got := c.received(); len(got) != 1 || got[0].sig != syscall.SIGTERM {
		t.Fatalf("group received %v, want the forwarded SIGTERM", got)
	}
	h.clock.Advance(testHeartbeat)
	h.renewOK() // still renewing during the grace period
	h.clock.Advance(testGrace - testHeartbeat)
	h.barrier()
	got := c.received()
	if len(got) != 1 || got[0].sig != syscall.SIGKILL || !got[0].at.Equal(t0.Add(testGrace)) {
		t.Fatalf("group received %v, want SIGKILL when --grace ran out", got)
	}
	ending, out := h.end(Exit{Code: -1, Signal: syscall.SIGKILL})
	if ending.Reason != ChildExited || ending.Exit.ExitCode() != 137 {
		t.Errorf("ending %+v, want ChildExited with 137", ending)
	}
	if out.Result != leasestore.ResultFailed {
		t.Errorf("outcome %v, want failed: leasectl sent that SIGKILL, it is no crash", out.Result)
	}
}

func TestSecondInterruptKillsAtOnce(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	c := h.waitStarted()
	h.signals <- syscall.SIGINT
	h.clock.Advance(100 * time.Millisecond)
	h.signals <- syscall.SIGINT
	h.barrier()
	got := c.received()
	if len(got) != 2 || got[0].sig != syscall.SIGINT || got[1].sig != syscall.SIGKILL {
		t.Fatalf("group received %v, want SIGINT then SIGKILL", got)
	}
	ending, _ := h.end(Exit{Code: -1, Signal: syscall.SIGKILL})
	if ending.Exit.ExitCode() != 137 {
		t.Errorf("exit code %d, want 137", ending.Exit.ExitCode())
	}
}

func TestForwardedSignalsAndTheChildsOwnCode(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	c := h.waitStarted()
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGTERM} {
		h.signals <- sig
	}
	h.barrier()
	var got []syscall.Signal
	for _, s := range c.received() {
		got = append(got, s.sig)
	}
	want := []syscall.Signal{syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGTERM}
	if !slices.Equal(got, want) {
		t.Fatalf("group received %v, want %v", got, want)
	}
	ending, out := h.end(Exit{Code: 3})
	if ending.Exit.ExitCode() != 3 || out.Result != leasestore.ResultFailed || out.ExitCode != 3 {
		t.Errorf("ending %+v outcome %+v, want the child's own code 3, failed", ending, out)
	}
}

func TestMaxRuntimeStopsTheChild(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxRuntime = 800 * time.Millisecond })
	h.store.grant(10)
	h.start()
	t0 := h.clock.Now()
	c := h.waitStarted()
	<-h.wd.updates
	h.clock.Advance(800 * time.Millisecond)
	h.barrier()
	if got := c.received(); len(got) != 1 || got[0].sig != syscall.SIGTERM {
		t.Fatalf("group received %v at --max-runtime, want SIGTERM", got)
	}
	h.clock.Advance(200 * time.Millisecond)
	h.renewOK()
	h.clock.Advance(testHeartbeat)
	h.renewOK()
	h.clock.Advance(800 * time.Millisecond)
	h.barrier()
	got := c.received()
	if len(got) != 1 || got[0].sig != syscall.SIGKILL || !got[0].at.Equal(t0.Add(800*time.Millisecond+testGrace)) {
		t.Fatalf("group received %v, want SIGKILL --grace after --max-runtime", got)
	}
	ending, out := h.end(Exit{Code: -1, Signal: syscall.SIGKILL})
	if ending.Reason != MaxRuntime || out.Result != leasestore.ResultFailed || !strings.Contains(out.Reason, "max-runtime") {
		t.Errorf("ending %v outcome %+v, want MaxRuntime, failed, reason naming --max-runtime", ending.Reason, out)
	}
}

func TestUnsentSignalIsACrash(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	h.waitStarted()
	ending, out := h.end(Exit{Code: -1, Signal: syscall.SIGSEGV})
	if out.Result != leasestore.ResultCrashed {
		t.Errorf("outcome %v, want crashed for a SIGSEGV nobody sent", out.Result)
	}
	if ending.Exit.ExitCode() != 128+int(syscall.SIGSEGV) {
		t.Errorf("exit code %d, want 139", ending.Exit.ExitCode())
	}
}

func TestNotStartedReleasesWithNothingCounted(t *testing.T) {
	h := newHarness(t, nil)
	h.startErr = &StartError{Code: 127, Err: errors.New(`exec: "nope": executable file not found in $PATH`)}
	h.store.grant(10)
	h.start()
	ending, out := h.wait()
	if ending.Reason != NotStarted || ending.Start.Code != 127 {
		t.Errorf("ending %+v, want NotStarted with 127", ending)
	}
	if out.Result != leasestore.ResultNotStarted || out.ExitCode != 127 {
		t.Errorf("outcome %+v, want not-started with 127", out)
	}
	if !h.wd.closed {
		t.Error("watchdog left running after a failed start")
	}
}

func TestMinIntervalSkipsWithoutStarting(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MinInterval = time.Hour })
	h.store.refuse(&leasestore.TooSoonError{Job: "nightly", MinInterval: time.Hour, Age: 10 * time.Minute})
	h.start()
	r := <-h.result
	var tooSoon *leasestore.TooSoonError
	if !errors.As(r.err, &tooSoon) {
		t.Fatalf("Run error = %v, want *TooSoonError", r.err)
	}
	h.noChildStarted("the child started although the job ran successfully 10 minutes ago")
}

func TestWaitWakesOnReleaseNotification(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Wait = true })
	h.store.refuse(&leasestore.HeldError{Job: "nightly", Holder: "other", ExpiresIn: time.Hour})
	h.store.grant(11)
	h.start()
	if held := <-h.held; held.Holder != "other" {
		t.Fatalf("status shows holder %q, want other", held.Holder)
	}
	h.store.notify <- struct{}{}
	h.waitStarted() // without the clock moving: woken by the release, not a timer
	h.end(Exit{Code: 0})
}

func TestWaitRetriesWhenTheHoldersTTLRunsOut(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Wait = true })
	h.store.refuse(&leasestore.HeldError{Job: "nightly", Holder: "other", ExpiresIn: 2 * time.Second})
	h.store.grant(11)
	h.start()
	<-h.held
	h.clock.awaitTimer(t, h.clock.Now().Add(2*time.Second+waitMargin)) // the loop is waiting
	h.clock.Advance(2*time.Second + waitMargin)
	h.waitStarted()
	h.end(Exit{Code: 0})
}

func TestWaitTimeout(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.WaitTimeout = time.Second })
	h.store.refuse(&leasestore.HeldError{Job: "nightly", Holder: "other", ExpiresIn: time.Hour})
	h.start()
	<-h.held
	h.clock.Advance(time.Second)
	r := <-h.result
	var wt *WaitTimeoutError
	var held *leasestore.HeldError
	if !errors.As(r.err, &wt) || !errors.As(r.err, &held) || held.Holder != "other" {
		t.Fatalf("Run error = %v, want *WaitTimeoutError wrapping the HeldError", r.err)
	}
}

func TestSignalEndsTheWaitCleanly(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Wait = true })
	h.store.refuse(&leasestore.HeldError{Job: "nightly", Holder: "other", ExpiresIn: time.Hour})
	h.start()
	<-h.held
	h.signals <- syscall.SIGTERM
	r := <-h.result
	if r.err != nil || r.ending.Reason != Interrupted || r.ending.Signal != syscall.SIGTERM {
		t.Fatalf("Run = %+v, want Interrupted by SIGTERM", r)
	}
	select {
	case <-h.started:
		t.Fatal("a child started after the wait was interrupted")
	case out := <-h.store.released:
		t.Fatalf("released %+v although nothing was held", out)
	default:
	}
}

func TestGrantAfterTheSafetyWindowIsNotUsed(t *testing.T) {
	h := newHarness(t, nil)
	h.store.queue(func(req leasestore.AcquireRequest) (*leasestore.Lease, error) {
		h.clock.Advance(testSafety) // the reply took the whole window
		return &leasestore.Lease{Job: req.Job, Holder: req.Holder, Token: 12, TTL: req.TTL}, nil
	})
	h.start()
	out := <-h.store.released
	r := <-h.result
	if !errors.Is(r.err, leasestore.ErrUnavailable) {
		t.Errorf("Run error = %v, want ErrUnavailable", r.err)
	}
	if out.Result != leasestore.ResultNotStarted {
		t.Errorf("released %v, want not-started", out.Result)
	}
	h.noChildStarted("the child started on a grant that arrived after its deadline")
}

func TestWatchdogKillAtTheDeadlineIsALostLeaseNotACrash(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	h.waitStarted()
	h.clock.Advance(testHeartbeat)
	h.nextRenew() // hangs
	// The watchdog kills the group at the deadline; the child's exit reaches
	// the loop before its own deadline timer does.
	h.clock.mu.Lock()
	h.clock.now = h.clock.now.Add(testSafety - testHeartbeat)
	h.clock.mu.Unlock()
	ending, out := h.end(Exit{Code: -1, Signal: syscall.SIGKILL})
	if ending.Reason != LeaseLost || out.Result != leasestore.ResultFailed {
		t.Errorf("ending %v outcome %v, want LeaseLost and failed, not a crash", ending.Reason, out.Result)
	}
}

func TestWatchdogDeathKillsTheChild(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	c := h.waitStarted()
	close(h.wd.died) // the OOM killer took it
	if got := c.next(t); got.sig != syscall.SIGKILL {
		t.Fatalf("group received %v, want SIGKILL: nothing would guard it if the supervisor stalled", got)
	}
	ending, out := h.end(Exit{Code: -1, Signal: syscall.SIGKILL})
	if ending.Reason != LeaseLost || out.Result != leasestore.ResultFailed {
		t.Errorf("ending %v outcome %v, want LeaseLost and failed", ending.Reason, out.Result)
	}
}

func TestForwardedSignalDoesNotExcuseAnotherOne(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	h.waitStarted()
	h.signals <- syscall.SIGUSR1 // e.g. a log rotation
	h.barrier()
	_, out := h.end(Exit{Code: -1, Signal: syscall.SIGSEGV})
	if out.Result != leasestore.ResultCrashed {
		t.Errorf("outcome %v, want crashed: leasectl forwarded SIGUSR1, not the SIGSEGV", out.Result)
	}
}

func TestRenewalConfirmedAfterTheDeadlineIsLost(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	c := h.waitStarted()
	h.clock.Advance(testHeartbeat)
	r := h.nextRenew()
	// The answer arrives when the deadline has passed but before the loop
	// saw its timer: the clock moves without firing it.
	h.clock.mu.Lock()
	h.clock.now = h.clock.now.Add(testSafety)
	h.clock.mu.Unlock()
	r.reply <- nil
	if got := c.next(t); got.sig != syscall.SIGKILL {
		t.Fatalf("group received %v, want SIGKILL for a renewal confirmed too late", got)
	}
	if ending, _ := h.end(Exit{Code: -1, Signal: syscall.SIGKILL}); ending.Reason != LeaseLost {
		t.Errorf("ending %v, want LeaseLost", ending.Reason)
	}
}

func TestSignalBeforeTheChildStartsStartsNothing(t *testing.T) {
	h := newHarness(t, nil)
	h.store.queue(func(req leasestore.AcquireRequest) (*leasestore.Lease, error) {
		// The operator's Ctrl-C arrives while the acquire is on its way.
		go func() { h.signals <- syscall.SIGINT }()
		for len(h.signals) == 0 {
			runtime.Gosched()
		}
		return &leasestore.Lease{Job: req.Job, Holder: req.Holder, Token: 12, TTL: req.TTL}, nil
	})
	h.signals = make(chan os.Signal, 1)
	h.start()
	ending, out := h.wait()
	if ending.Reason != Interrupted || ending.Signal != syscall.SIGINT {
		t.Errorf("ending %+v, want Interrupted by SIGINT", ending)
	}
	if out.Result != leasestore.ResultNotStarted {
		t.Errorf("released %v, want not-started", out.Result)
	}
	h.noChildStarted("the child started after a Ctrl-C")
}

func TestSignalsReachTheGroupOnceTheWatchdogIsReady(t *testing.T) {
	h := newHarness(t, nil)
	h.wd.ready = make(chan struct{}) // still starting up
	h.store.grant(10)
	h.start()
	c := h.waitStarted()
	h.signals <- syscall.SIGHUP
	if got := c.next(t); got.sig != -syscall.SIGHUP {
		t.Fatalf("before the watchdog is ready, got %v, want SIGHUP to the child alone: it would kill the watchdog", got)
	}
	close(h.wd.ready)
	// The loop sees the watchdog's readiness in its own time: forward
	// SIGUSR2 until one reaches the group.
	for groupWide := false; !groupWide; {
		h.signals <- syscall.SIGUSR2
		got := <-c.signals
		groupWide = got.sig == syscall.SIGUSR2
	}
	h.signals <- syscall.SIGHUP
	if got := c.next(t); got.sig != syscall.SIGHUP {
		t.Fatalf("once the watchdog is ready, got %v, want SIGHUP to the whole group", got)
	}
	h.end(Exit{Code: 0})
}

func TestWaitSurvivesAStoreFailingWhileWaiting(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Wait = true })
	h.store.refuse(&leasestore.HeldError{Job: "nightly", Holder: "other", ExpiresIn: time.Second})
	h.store.refuse(&leasestore.UnavailableError{Op: "acquire", Err: errors.New("connection refused")})
	h.store.grant(11)
	h.start()
	<-h.held
	h.clock.awaitTimer(t, h.clock.Now().Add(time.Second+waitMargin)) // the loop is waiting
	h.clock.Advance(time.Second + waitMargin)                        // the holder's TTL: try again, and the store fails
	h.clock.awaitTimer(t, h.clock.Now().Add(retryDelay(testHeartbeat)))
	h.clock.Advance(retryDelay(testHeartbeat))
	h.waitStarted()
	h.end(Exit{Code: 0})
}

func TestStoreFailingBeforeAnyWaitIsAnError(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Wait = true })
	h.store.refuse(&leasestore.UnavailableError{Op: "acquire", Err: errors.New("connection refused")})
	h.start()
	if r := <-h.result; !errors.Is(r.err, leasestore.ErrUnavailable) {
		t.Fatalf("Run error = %v, want ErrUnavailable: a store unreachable from the start is a configuration problem", r.err)
	}
}

func TestAGrantThatCameTooLateIsReleased(t *testing.T) {
	h := newHarness(t, nil)
	h.store.queue(func(req leasestore.AcquireRequest) (*leasestore.Lease, error) {
		// The store granted it, but the answer never reached leasectl.
		h.store.holder = &leasestore.Holder{Job: req.Job, Worker: req.Holder, Token: 13}
		return nil, context.DeadlineExceeded
	})
	h.start()
	out := <-h.store.released
	r := <-h.result
	if !errors.Is(r.err, leasestore.ErrUnavailable) {
		t.Errorf("Run error = %v, want ErrUnavailable", r.err)
	}
	if out.Result != leasestore.ResultNotStarted {
		t.Errorf("released %v, want not-started: a lease nobody releases would count as a crash", out.Result)
	}
}

func TestOwnSIGKILLTakingTheWatchdogIsNoLostLease(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	c := h.waitStarted()
	h.signals <- syscall.SIGTERM
	h.signals <- syscall.SIGTERM // second one: SIGKILL to the group, the watchdog included
	if got := c.next(t); got.sig != syscall.SIGTERM {
		t.Fatalf("group received %v, want SIGTERM first", got)
	}
	if got := c.next(t); got.sig != syscall.SIGKILL {
		t.Fatalf("group received %v, want SIGKILL", got)
	}
	close(h.wd.died)
	h.barrier()
	ending, out := h.end(Exit{Code: -1, Signal: syscall.SIGKILL})
	if ending.Reason != ChildExited || ending.Exit.ExitCode() != 137 || out.Result != leasestore.ResultFailed {
		t.Errorf("ending %v exit %d outcome %v, want ChildExited 137 failed: the watchdog died of leasectl's own SIGKILL",
			ending.Reason, ending.Exit.ExitCode(), out.Result)
	}
}
