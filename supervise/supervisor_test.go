package supervise

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/leasectl/leasectl/leasestore"
)

func TestRenewOKMovesTheDeadline(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	t0 := h.clock.Now()
	c := h.waitStarted()
	for _, want := range []string{"LEASECTL_JOB_ID=nightly", "LEASECTL_FENCING_TOKEN=10", "LEASECTL_SLOT=0", "LEASECTL_WORKER_ID=w1", "LEASECTL_ATTEMPT=1", "LEASECTL_LEASE_TTL_MS=3000"} {
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
	if c.pgid != h.wd.Group() {
		t.Errorf("child started in group %d, want the watchdog's group %d", c.pgid, h.wd.Group())
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
		h.clock.AwaitTimer(t, h.clock.Now().Add(retryDelay(testHeartbeat)))
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

func TestStopRequestStopsTheChild(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	t0 := h.clock.Now()
	c := h.waitStarted()
	<-h.wd.updates
	h.store.mu.Lock()
	h.store.stop = &leasestore.StopRequest{By: "alice@host", Reason: "bad deploy", At: t0}
	h.store.mu.Unlock()
	h.clock.Advance(testHeartbeat)
	h.renewOK()
	h.barrier()
	if got := c.received(); len(got) != 1 || got[0].sig != syscall.SIGTERM || !got[0].at.Equal(t0.Add(testHeartbeat)) {
		t.Fatalf("group received %v, want SIGTERM at the renewal that reported the stop", got)
	}
	// The job stays held while the child stops: renewals go on.
	h.clock.Advance(testHeartbeat)
	h.renewOK()
	h.clock.Advance(testGrace - testHeartbeat)
	h.barrier()
	if got := c.received(); len(got) != 1 || got[0].sig != syscall.SIGKILL || !got[0].at.Equal(t0.Add(testHeartbeat+testGrace)) {
		t.Fatalf("group received %v, want SIGKILL --grace after the stop", got)
	}
	ending, out := h.end(Exit{Code: -1, Signal: syscall.SIGKILL})
	if ending.Reason != Stopped || out.Result != leasestore.ResultFailed || out.Reason != "stopped by alice@host: bad deploy" {
		t.Errorf("ending %v outcome %+v, want Stopped, failed, stopped by alice@host: bad deploy", ending.Reason, out)
	}
}

func TestWhatCountsAsACrash(t *testing.T) {
	// A child killed by a signal leasectl did not send crashed only if the
	// signal says the program died abnormally; any other signal is someone
	// asking it to stop, or a reader gone: a failed run. Either way the
	// run exits 128+N.
	tests := []struct {
		sig  syscall.Signal
		want leasestore.Result
	}{
		{syscall.SIGSEGV, leasestore.ResultCrashed},
		{syscall.SIGBUS, leasestore.ResultCrashed},
		{syscall.SIGILL, leasestore.ResultCrashed},
		{syscall.SIGFPE, leasestore.ResultCrashed},
		{syscall.SIGTRAP, leasestore.ResultCrashed},
		{syscall.SIGSYS, leasestore.ResultCrashed},
		{syscall.SIGABRT, leasestore.ResultCrashed},
		{syscall.SIGKILL, leasestore.ResultCrashed}, // the OOM killer's
		{syscall.SIGXCPU, leasestore.ResultCrashed},
		{syscall.SIGXFSZ, leasestore.ResultCrashed},
		{syscall.SIGPIPE, leasestore.ResultFailed}, // seq | head -1
		{syscall.SIGTERM, leasestore.ResultFailed}, // an operator's kill CHILD
		{syscall.SIGINT, leasestore.ResultFailed},
		{syscall.SIGHUP, leasestore.ResultFailed},
		{syscall.SIGQUIT, leasestore.ResultFailed},
		{syscall.SIGUSR1, leasestore.ResultFailed},
		{syscall.SIGALRM, leasestore.ResultFailed},
	}
	for _, tc := range tests {
		t.Run(unix.SignalName(tc.sig), func(t *testing.T) {
			h := newHarness(t, nil)
			h.store.grant(10)
			h.start()
			h.waitStarted()
			ending, out := h.end(Exit{Code: -1, Signal: tc.sig})
			if out.Result != tc.want || out.Signal != int(tc.sig) {
				t.Errorf("outcome %v signal %d, want %v signal %d", out.Result, out.Signal, tc.want, tc.sig)
			}
			if got, want := ending.Exit.ExitCode(), 128+int(tc.sig); got != want {
				t.Errorf("exit code %d, want %d", got, want)
			}
			if wantReason := "killed by " + unix.SignalName(tc.sig) + ", which leasectl did not send"; tc.want == leasestore.ResultCrashed && out.Reason != wantReason {
				t.Errorf("reason %q, want %q", out.Reason, wantReason)
			}
		})
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
}

func TestMinIntervalSkipsWithoutStarting(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MinInterval = time.Hour })
	h.store.refuse(&leasestore.TooSoonError{Job: "nightly", MinInterval: time.Hour, Age: 10 * time.Minute})
	h.start()
	r := h.refused()
	var tooSoon *leasestore.TooSoonError
	if !errors.As(r.err, &tooSoon) {
		t.Fatalf("Run error = %v, want *TooSoonError", r.err)
	}
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

// A subscription's Close may take long (the embedded store's waits for the
// kernel to free its inotify watch): the child must not wait for it, nor
// be forked while it is under way (the child would hold the inotify
// instance until its exec, which would wait instead), but Run must wait for
// it, so that the caller does not close the store under it.
func TestWaitClosesItsSubscriptionBesideTheChild(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Wait = true })
	h.store.subClose = make(chan struct{})
	h.store.refuse(&leasestore.HeldError{Job: "nightly", Holder: "other", ExpiresIn: time.Hour})
	h.store.grant(11)
	h.start()
	<-h.held
	h.store.notify <- struct{}{}
	h.waitStarted()
	if h.closingAtStart != 0 {
		t.Errorf("the subscription's Close was called before the child was started")
	}
	h.child.done <- Exit{Code: 0}
	h.released()
	select {
	case <-h.result:
		t.Fatal("Run returned before its subscription was closed")
	default:
	}
	close(h.store.subClose)
	h.returned()
	if n := h.store.subsClosed(); n != 1 {
		t.Errorf("Run returned with %d subscriptions closed, want 1", n)
	}
}

// A wait that ends without the lease closes its subscription before Run
// returns too.
func TestWaitTimeoutClosesItsSubscription(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Wait = true; c.WaitTimeout = time.Minute })
	h.store.refuse(&leasestore.HeldError{Job: "nightly", Holder: "other", ExpiresIn: time.Hour})
	h.start()
	<-h.held
	h.clock.AwaitTimer(t, h.clock.Now().Add(time.Minute))
	h.clock.Advance(time.Minute)
	select {
	case r := <-h.result:
		var wt *WaitTimeoutError
		if !errors.As(r.err, &wt) {
			t.Fatalf("Run returned %v, want a WaitTimeoutError", r.err)
		}
	case <-time.After(hangGuard):
		t.Fatal("Run did not return")
	}
	if n := h.store.subsClosed(); n != 1 {
		t.Errorf("Run returned with %d subscriptions closed, want 1", n)
	}
}

func TestWaitRetriesWhenTheHoldersTTLRunsOut(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Wait = true })
	h.store.refuse(&leasestore.HeldError{Job: "nightly", Holder: "other", ExpiresIn: 2 * time.Second})
	h.store.grant(11)
	h.start()
	<-h.held
	h.clock.AwaitTimer(t, h.clock.Now().Add(2*time.Second+waitMargin)) // the loop is waiting
	h.clock.Advance(2*time.Second + waitMargin)
	h.waitStarted()
	h.end(Exit{Code: 0})
}

func TestWaitWakesWhenTheHoldersSupervisorOnThisHostExits(t *testing.T) {
	// A holder on this host is watched, on a store that can prove its run
	// over once its supervisor is gone: that exit wakes the waiter at once.
	// A holder elsewhere, or on a store that cannot (where the exit would
	// wake every waiter of the host for nothing), is waited for until its
	// lease expires or a release wakes the waiter.
	for _, tc := range []struct {
		name, host      string
		proves, watched bool
	}{{"here", "h1", true, true}, {"elsewhere", "h2", true, false}, {"cannot-prove", "h1", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.Wait = true })
			if tc.proves {
				h.storeAs = groupNoting
			}
			exited := make(chan struct{})
			watches, stops := make(chan int, 1), make(chan struct{}, 1)
			h.watchExit = func(pid int) (<-chan struct{}, func()) {
				watches <- pid
				return exited, func() { stops <- struct{}{} }
			}
			h.store.refuse(&leasestore.HeldError{Job: "nightly", Holder: "other", Host: tc.host, PID: 99, ExpiresIn: time.Hour})
			h.store.grant(11)
			h.start()
			<-h.held
			h.clock.AwaitTimer(t, h.clock.Now().Add(time.Hour+waitMargin)) // the loop is waiting
			select {
			case pid := <-watches:
				if !tc.watched || pid != 99 {
					t.Fatalf("watched pid %d of a holder on host %s, want %v", pid, tc.host, tc.watched)
				}
				close(exited)
			default:
				if tc.watched {
					t.Fatal("the holder on this host was not watched")
				}
				h.clock.Advance(time.Hour + waitMargin)
			}
			h.waitStarted()
			if tc.watched {
				<-stops // the watch ended with the wait
			}
			h.end(Exit{Code: 0})
		})
	}
}

func TestWaitAsksAgainSoonWhenTheHoldersSupervisorIsAlreadyGone(t *testing.T) {
	// The store still holds the job for a supervisor of this host that
	// exited before the watch began (its watchdog is ending the group): the
	// waiter asks again after goneHolderRetry, then twice that, not after
	// the lease's hour.
	h := newHarness(t, func(c *Config) { c.Wait = true })
	h.storeAs = groupNoting
	h.watchExit = func(int) (<-chan struct{}, func()) { return closed(), func() {} }
	gone := &leasestore.HeldError{Job: "nightly", Holder: "other", Host: "h1", PID: 99, ExpiresIn: time.Hour}
	h.store.refuse(gone)
	h.store.refuse(gone)
	h.store.grant(11)
	h.start()
	for _, after := range []time.Duration{goneHolderRetry, 2 * goneHolderRetry} {
		<-h.held
		h.clock.AwaitTimer(t, h.clock.Now().Add(after))
		h.clock.Advance(after)
	}
	h.waitStarted()
	h.end(Exit{Code: 0})
}

// errSubscriptionsFull is how a registry at its subscription limit answers.
var errSubscriptionsFull = &leasestore.UnavailableError{Op: "subscribe", Err: errors.New("too_many_subscriptions")}

func TestWaitTriesTheLeaseWhenItCannotSubscribe(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Wait = true })
	h.store.failSubscribes(errSubscriptionsFull)
	h.store.grant(11)
	h.start()
	h.waitStarted() // the lease was free: no subscription needed to take it
	if n := h.store.subscribeCalls(); n != 1 {
		t.Errorf("%d subscriptions asked for, want the one refused, before the attempt", n)
	}
	h.end(Exit{Code: 0})
}

// A subscription whose answer never comes back (a registry's reply lost
// on the way) is given up after --safety, as a refused one is: the run goes
// on to try the lease instead of hanging there, deaf to signals.
func TestWaitTriesTheLeaseWhenSubscribingIsNotAnswered(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Wait = true })
	h.store.failSubscribes(errSubscribeUnanswered)
	h.store.grant(11)
	h.start()
	h.waitStarted()
	h.end(Exit{Code: 0})
}

func TestWaitWithoutSubscriptionWakesAtTheHoldersExpiry(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Wait = true })
	h.store.failSubscribes(errSubscriptionsFull)
	h.store.refuse(&leasestore.HeldError{Job: "nightly", Holder: "other", ExpiresIn: 2 * time.Second})
	h.store.grant(11)
	h.start()
	<-h.held
	h.clock.AwaitTimer(t, h.clock.Now().Add(2*time.Second+waitMargin))
	h.clock.Advance(2*time.Second + waitMargin)
	h.waitStarted()
	if n := h.store.subscribeCalls(); n != 2 {
		t.Errorf("%d subscriptions asked for, want 2: the refused one, and again on waking", n)
	}
	h.end(Exit{Code: 0})
}

func TestWaitTimeout(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.WaitTimeout = time.Second })
	h.store.refuse(&leasestore.HeldError{Job: "nightly", Holder: "other", ExpiresIn: time.Hour})
	h.start()
	<-h.held
	h.clock.Advance(time.Second)
	r := h.refused()
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
	r := h.refused()
	if r.err != nil || r.ending.Reason != Interrupted || r.ending.Signal != syscall.SIGTERM {
		t.Fatalf("Run = %+v, want Interrupted by SIGTERM", r)
	}
	select {
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
	r := h.refused()
	if !errors.Is(r.err, leasestore.ErrUnavailable) {
		t.Errorf("Run error = %v, want ErrUnavailable", r.err)
	}
	if out.Result != leasestore.ResultNotStarted {
		t.Errorf("released %v, want not-started", out.Result)
	}
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
	h.clock.Jump(testSafety - testHeartbeat)
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
	h.clock.Jump(testSafety)
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
	h.clock.AwaitTimer(t, h.clock.Now().Add(time.Second+waitMargin)) // the loop is waiting
	h.clock.Advance(time.Second + waitMargin)                        // the holder's TTL: try again, and the store fails
	h.clock.AwaitTimer(t, h.clock.Now().Add(retryDelay(testHeartbeat)))
	h.clock.Advance(retryDelay(testHeartbeat))
	h.waitStarted()
	h.end(Exit{Code: 0})
}

func TestStoreFailingWithoutWaitIsAnError(t *testing.T) {
	h := newHarness(t, nil)
	h.store.refuse(&leasestore.UnavailableError{Op: "acquire", Err: errors.New("connection refused")})
	h.start()
	if r := h.refused(); !errors.Is(r.err, leasestore.ErrUnavailable) {
		t.Fatalf("Run error = %v, want ErrUnavailable (exit 69)", r.err)
	}
}

func TestWaitRetriesAStoreFailingFromTheFirstAttempt(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Wait = true })
	h.store.refuse(&leasestore.UnavailableError{Op: "acquire", Err: errors.New("connection refused")})
	h.store.grant(11)
	h.start()
	h.clock.AwaitTimer(t, h.clock.Now().Add(retryDelay(testHeartbeat)))
	h.clock.Advance(retryDelay(testHeartbeat))
	h.waitStarted()
	h.end(Exit{Code: 0})
}

func TestWaitRetriesAFirstAcquireWithoutAnswer(t *testing.T) {
	// A dropped SYN is retransmitted after a second: neither ask of the
	// first attempt is answered within --safety.
	h := newHarness(t, func(c *Config) { c.Wait = true })
	h.start()
	h.clock.AwaitTimer(t, h.clock.Now().Add(retryDelay(testHeartbeat)))
	if n := h.store.acquireCalls(); n != acquireAsks {
		t.Fatalf("%d asks before the first retry, want %d", n, acquireAsks)
	}
	h.store.grant(11)
	h.clock.Advance(retryDelay(testHeartbeat))
	h.waitStarted()
	h.end(Exit{Code: 0})
}

// A grant of this run whose answers were lost expires before the run asks
// again, and is counted as a crash, by this run's next Acquire or another
// waiter's. The run that got its lease later finds that crash in the job's
// history once it has ended and records the grant late as not started,
// which withdraws it (issue 11: a grant whose child never started is no
// crash); if the store does not take that, the outbox keeps it. Other
// crashes are left alone.
func TestUnheardGrantCountedAsACrashIsWithdrawnAfterTheRun(t *testing.T) {
	grant := func(worker string, token int64, at time.Time) []leasestore.Event {
		return []leasestore.Event{{At: at, Kind: leasestore.EventAcquired, Worker: worker, Token: token},
			{At: at.Add(time.Second), Kind: leasestore.EventCrashed, Worker: worker, Token: token}}
	}
	for _, tc := range []struct {
		name      string
		history   func(began time.Time) []leasestore.Event
		storeDown bool  // RecordLate fails
		withdraw  int64 // the token recorded late, 0 for none
	}{
		{"this run's grant", func(began time.Time) []leasestore.Event { return grant("w1", 5, began) }, false, 5},
		{"this run's grant, the store down", func(began time.Time) []leasestore.Event { return grant("w1", 5, began) }, true, 5},
		{"already corrected", func(began time.Time) []leasestore.Event {
			return append(grant("w1", 5, began), leasestore.Event{Kind: leasestore.EventLateOutcome, Worker: "w1", Token: 5})
		}, false, 0},
		{"an older run with the same worker ID", func(began time.Time) []leasestore.Event { return grant("w1", 3, began.Add(-time.Hour)) }, false, 0},
		{"its grant out of the history", func(began time.Time) []leasestore.Event { return grant("w1", 5, began)[1:] }, false, 0},
		{"a later run with the same worker ID", func(began time.Time) []leasestore.Event { return grant("w1", 15, began) }, false, 0},
		{"another worker's", func(began time.Time) []leasestore.Event { return grant("w2", 5, began) }, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.Wait = true })
			h.store.history = tc.history(h.clock.Now())
			if tc.storeDown {
				h.store.failLate = errNoAnswer
			}
			h.start()
			h.clock.AwaitTimer(t, h.clock.Now().Add(retryDelay(testHeartbeat))) // both asks unanswered
			h.store.grant(11)
			h.clock.Advance(retryDelay(testHeartbeat))
			h.waitStarted()
			h.end(Exit{Code: 1})
			var asked []int64
			for _, l := range h.store.recordedLate() {
				if l.Holder != "w1" || l.Result != leasestore.ResultNotStarted {
					t.Errorf("RecordLate got %+v, want w1's not-started outcome", l)
				}
				asked = append(asked, l.Token)
			}
			var want []int64
			if tc.withdraw != 0 {
				want = []int64{tc.withdraw}
			}
			if !slices.Equal(asked, want) {
				t.Errorf("RecordLate for tokens %v, want %v", asked, want)
			}
			kept := h.outbox.contents()
			if tc.storeDown != (len(kept) == 1) || tc.storeDown && kept[0].Token != tc.withdraw {
				t.Errorf("outbox %+v, want the late outcome kept only when the store did not take it", kept)
			}
		})
	}
}

// A run whose requests were all answered has no grant it never heard of:
// a crash of its worker ID in the history is not its business.
func TestAnsweredRunLeavesTheHistoryAlone(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Wait = true })
	h.store.history = []leasestore.Event{{At: h.clock.Now(), Kind: leasestore.EventAcquired, Worker: "w1", Token: 5},
		{At: h.clock.Now(), Kind: leasestore.EventCrashed, Worker: "w1", Token: 5}}
	h.store.grant(11)
	h.start()
	h.waitStarted()
	h.end(Exit{Code: 0})
	if lates := h.store.recordedLate(); len(lates) != 0 {
		t.Errorf("RecordLate got %+v, want nothing", lates)
	}
}

func TestWaitTimeoutWhileTheStoreFails(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.WaitTimeout = time.Second })
	for range 10 {
		h.store.refuse(&leasestore.UnavailableError{Op: "acquire", Err: errors.New("connection refused")})
	}
	h.start()
	h.clock.AwaitTimer(t, h.clock.Now().Add(retryDelay(testHeartbeat)))
	h.clock.Advance(time.Second)
	r := h.refused()
	var wt *WaitTimeoutError
	var held *leasestore.HeldError
	if !errors.As(r.err, &wt) || !errors.Is(r.err, leasestore.ErrUnavailable) || errors.As(r.err, &held) {
		t.Fatalf("Run error = %v, want *WaitTimeoutError wrapping the store's failure (exit 69, not 75)", r.err)
	}
}

func TestAnAcquireWithoutAnswerIsAskedAgain(t *testing.T) {
	h := newHarness(t, nil)
	h.store.queue(func(req leasestore.AcquireRequest) (*leasestore.Lease, error) {
		// The store granted it, but the answer never reached leasectl,
		// which gave up after the whole safety window.
		h.store.grantNow(req, 13)
		h.clock.Advance(testSafety)
		return nil, errNoAnswer
	})
	t0 := h.clock.Now()
	h.start()
	c := h.waitStarted()
	t1 := h.clock.Now() // the second ask's send time
	if t1.Sub(t0) != testSafety {
		t.Fatalf("child started %s after the first ask, want right after the second, --safety later", t1.Sub(t0))
	}
	if h.store.acquireCalls() != 2 {
		t.Errorf("store asked %d times, want twice", h.store.acquireCalls())
	}
	if !slices.Contains(c.env, "LEASECTL_FENCING_TOKEN=13") {
		t.Errorf("child environment %v, want the token of the grant whose answer was lost", c.env)
	}
	// The deadline counts from the second ask's send time: counted from the
	// first, it would have passed before the child started.
	if left := <-h.wd.updates; left != testSafety {
		t.Errorf("watchdog's first deadline is %s away, want --safety %s from the second ask", left, testSafety)
	}
	h.clock.Advance(testHeartbeat)
	if r := h.renewOK(); !r.at.Equal(t1.Add(testHeartbeat)) {
		t.Errorf("first renewal sent %s after the second ask, want a heartbeat", r.at.Sub(t1))
	}
	ending, out := h.end(Exit{Code: 0})
	if ending.Reason != ChildExited || ending.Lease.Token != 13 || out.Result != leasestore.ResultCompleted {
		t.Errorf("ending %+v outcome %+v, want ChildExited on token 13, completed", ending, out)
	}
}

func TestAnAcquireUnansweredTwiceIsUnavailable(t *testing.T) {
	h := newHarness(t, nil) // nothing queued: the store answers nothing
	h.start()
	err := h.refused().err
	var ue *leasestore.UnavailableError
	if !errors.As(err, &ue) || ue.Op != "acquire" {
		t.Fatalf("Run error = %v, want *UnavailableError during acquire", err)
	}
	if h.store.acquireCalls() != 2 {
		t.Errorf("store asked %d times, want twice: once more after no answer, then give up", h.store.acquireCalls())
	}
}

func TestARefusalOnTheSecondAskIsTheResult(t *testing.T) {
	h := newHarness(t, nil)
	h.store.queue(func(leasestore.AcquireRequest) (*leasestore.Lease, error) {
		h.clock.Advance(testSafety)
		return nil, errNoAnswer
	})
	h.store.refuse(&leasestore.HeldError{Job: "nightly", Holder: "other", ExpiresIn: time.Second})
	h.start()
	err := h.refused().err
	var held *leasestore.HeldError
	if !errors.As(err, &held) || held.Holder != "other" {
		t.Fatalf("Run error = %v, want the second ask's *HeldError", err)
	}
	if h.store.acquireCalls() != 2 {
		t.Errorf("store asked %d times, want twice", h.store.acquireCalls())
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

// ttlLimitedStore is the fake store declaring the TTL range it honours, as
// the etcd store does.
type ttlLimitedStore struct{ *fakeStore }

func (ttlLimitedStore) Limits() leasestore.Limits {
	return leasestore.Limits{MinTTL: 5 * time.Second, MaxTTL: time.Hour, MaxSlots: 1}
}

func TestRunRefusesATTLTheStoreCannotHonour(t *testing.T) {
	h := newHarness(t, nil) // --ttl 3s
	h.store.grant(10)
	s := &Supervisor{Store: leasestore.New(ttlLimitedStore{h.store}), Clock: h.clock, Log: zerolog.Nop()}
	_, err := s.Run(context.Background(), h.cfg)
	if !IsConfigError(err) || !strings.Contains(err.Error(), "--ttl 3s is below the store's minimum lease TTL 5s") {
		t.Fatalf("Run with --ttl 3s on a store whose minimum is 5s = %v, want a usage error naming the limit", err)
	}
	if n := h.store.acquireCalls(); n != 0 {
		t.Errorf("store asked %d times for a TTL it cannot honour, want never", n)
	}
}

func TestRunRefusesABadConfigBeforeAnyIO(t *testing.T) {
	h := newHarness(t, nil)
	h.cfg.Heartbeat = 2 * time.Second // more than --ttl/3
	h.store.grant(10)
	h.start()
	err := h.refused().err
	var ce *ConfigError
	if !errors.As(err, &ce) || !IsConfigError(err) {
		t.Fatalf("Run error = %v, want the *ConfigError naming the rule", err)
	}
	if n := h.store.acquireCalls(); n != 0 {
		t.Errorf("store asked %d times for a config that breaks a rule, want never", n)
	}
}

func TestRunAppliesTheDefaults(t *testing.T) {
	const ttl = 6 * time.Second
	h := newHarness(t, func(c *Config) { c.TTL = ttl })
	h.cfg.Heartbeat, h.cfg.Safety, h.cfg.Grace = 0, 0, 0
	h.store.grant(10)
	h.start()
	t0 := h.clock.Now()
	select {
	case <-h.started:
	case r := <-h.result:
		t.Fatalf("Run = %+v, want the child started with the defaults", r)
	case <-time.After(hangGuard):
		t.Fatal("child never started")
	}
	if left := <-h.wd.updates; left != ttl/2 {
		t.Errorf("watchdog's first deadline is %s away, want the default --safety --ttl/2", left)
	}
	h.clock.AwaitTimer(t, t0.Add(ttl/3)) // the default heartbeat
	h.clock.Advance(ttl / 3)
	r := h.nextRenew()
	if !r.at.Equal(t0.Add(ttl / 3)) {
		t.Errorf("first renewal sent %s after the grant, want the default --ttl/3", r.at.Sub(t0))
	}
	r.reply <- nil
	h.end(Exit{Code: 0})
}

func TestWatchdogsOwnKillBeforeTheDeadlineIsALostLease(t *testing.T) {
	// Starved of CPU, the watchdog missed the deadline the supervisor had
	// already moved, and killed the group on the one before: safe (early),
	// but its doing, not a crash.
	for _, diedFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("watchdog death seen first %v", diedFirst), func(t *testing.T) {
			h := newHarness(t, nil)
			h.store.grant(10)
			h.start()
			c := h.waitStarted()
			h.clock.Advance(testHeartbeat)
			h.renewOK()
			close(h.wd.fired)
			if diedFirst {
				close(h.wd.died)
				if got := c.next(t); got.sig != syscall.SIGKILL {
					t.Fatalf("group received %v, want SIGKILL once the watchdog is gone", got)
				}
			}
			ending, out := h.end(Exit{Code: -1, Signal: syscall.SIGKILL})
			if ending.Reason != LeaseLost || out.Result != leasestore.ResultFailed {
				t.Fatalf("ending %v outcome %v, want LeaseLost (exit 125) and failed, not a crash", ending.Reason, out.Result)
			}
			if !strings.Contains(out.Reason, "watchdog killed the process group") {
				t.Errorf("reason %q, want it to say the watchdog killed the group", out.Reason)
			}
		})
	}
}

func TestGroupGoneBeforeTheChildStartedIsALostLease(t *testing.T) {
	// Frozen between the deadline check and the fork: the watchdog killed
	// its group, still empty, at the deadline, so the child cannot join it.
	h := newHarness(t, nil)
	h.store.grant(10)
	h.startHook = func() error {
		h.clock.Jump(testSafety)
		return &StartError{Code: 126, Err: &os.PathError{Op: "fork/exec", Path: "./job.sh", Err: syscall.EPERM}}
	}
	h.start()
	out := <-h.store.released
	r := <-h.result
	if r.err != nil || r.ending.Reason != LeaseLost {
		t.Fatalf("Run = %+v, %v; want a LeaseLost ending (exit 125), not a command that could not start (126)", r.ending, r.err)
	}
	if out.Result != leasestore.ResultNotStarted || !strings.Contains(out.Reason, "lease lost") {
		t.Errorf("released %v %q, want not-started, lease lost", out.Result, out.Reason)
	}
}

func TestRenewalFailuresAreNamedWhenTheLeaseIsLost(t *testing.T) {
	var logs bytes.Buffer
	h := newHarness(t, nil)
	h.log = &logs
	h.store.grant(10)
	h.start()
	c := h.waitStarted()
	h.clock.Advance(testHeartbeat)
	full := &leasestore.UnavailableError{Op: "renew", Err: errors.New("disk full writing embedded store file /state/x: free some space (no space left on device)")}
	h.nextRenew().reply <- full
	h.clock.AwaitTimer(t, h.clock.Now().Add(retryDelay(testHeartbeat)))
	h.clock.Advance(retryDelay(testHeartbeat))
	h.nextRenew().reply <- &leasestore.UnavailableError{Op: "renew", Err: context.DeadlineExceeded}
	h.clock.Advance(testSafety)
	if got := c.next(t); got.sig != syscall.SIGKILL {
		t.Fatalf("group received %v, want SIGKILL at the deadline", got)
	}
	// The release fails until its time is up, its last call cut short.
	failing := []error{full}
	for range 100 {
		failing = append(failing, &leasestore.UnavailableError{Op: "release", Err: context.Canceled})
	}
	h.store.failReleases(failing...)
	h.child.done <- Exit{Code: -1, Signal: syscall.SIGKILL}
	h.clock.AwaitTimer(t, h.clock.Now().Add(retryDelay(testHeartbeat)))
	h.clock.Advance(releaseTimeout)
	r := <-h.result
	if r.ending.Reason != LeaseLost {
		t.Fatalf("ending %v, want LeaseLost", r.ending.Reason)
	}
	var lost, last string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(line, "lease lost") && lost == "" {
			lost = line
		}
		last = line
	}
	if !strings.Contains(lost, "disk full") {
		t.Errorf("the lease-lost line %s does not name the renewals' failure", lost)
	}
	if !strings.Contains(last, "disk full") || strings.Contains(last, "deadline exceeded") {
		t.Errorf("the last line %s names the deadline, not the disk", last)
	}
}

func TestReleaseThatNeverGetsThroughIsKeptInTheOutbox(t *testing.T) {
	// A partition: the child ends, and every release fails until the
	// supervisor gives up on it.
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	h.waitStarted()
	failing := make([]error, 100)
	for i := range failing {
		failing[i] = &leasestore.UnavailableError{Op: "release", Err: errors.New("i/o timeout")}
	}
	h.store.failReleases(failing...)
	h.child.done <- Exit{Code: 0}
	h.clock.AwaitTimer(t, h.clock.Now().Add(retryDelay(testHeartbeat)))
	h.clock.Advance(releaseTimeout)
	r := <-h.result
	if r.err != nil || r.ending.Exit.Code != 0 {
		t.Fatalf("Run = %+v, %v; want the child's own exit 0", r.ending, r.err)
	}
	kept := h.outbox.contents()
	if len(kept) != 1 || kept[0].Job != "nightly" || kept[0].Holder != "w1" || kept[0].Token != 10 || kept[0].Result != leasestore.ResultCompleted {
		t.Errorf("outbox %+v, want the completed outcome of token 10", kept)
	}
}

func TestLeaseGoneAtReleaseRecordsTheOutcomeLate(t *testing.T) {
	// Cut off past its TTL, the run's crash was counted elsewhere; the
	// partition heals as it releases.
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	h.waitStarted()
	h.store.failReleases(fmt.Errorf("release: %w", leasestore.ErrLeaseLost))
	h.child.done <- Exit{Code: 3}
	r := <-h.result
	if r.err != nil || r.ending.Exit.Code != 3 {
		t.Fatalf("Run = %+v, %v; want the child's own exit 3", r.ending, r.err)
	}
	lates := h.store.recordedLate()
	if len(lates) != 1 || lates[0].Token != 10 || lates[0].Holder != "w1" || lates[0].Result != leasestore.ResultFailed || lates[0].ExitCode != 3 {
		t.Errorf("RecordLate got %+v, want the failed outcome (exit 3) of token 10", lates)
	}
	if kept := h.outbox.contents(); len(kept) != 0 {
		t.Errorf("outbox %+v, want nothing: the store took the outcome", kept)
	}
}

func TestUnansweredAcquireGivenUpIsAbandoned(t *testing.T) {
	for _, storeDown := range []bool{false, true} {
		t.Run(fmt.Sprintf("store down %v", storeDown), func(t *testing.T) {
			h := newHarness(t, nil)
			if storeDown {
				h.store.failLate = errNoAnswer
			}
			h.start() // nothing queued: both asks go unanswered
			r := h.refused()
			if !errors.Is(r.err, leasestore.ErrUnavailable) {
				t.Fatalf("Run error %v, want ErrUnavailable (exit 69)", r.err)
			}
			lates := h.store.recordedLate()
			if len(lates) != 1 || lates[0].Holder != "w1" || lates[0].Token != 0 || lates[0].Result != leasestore.ResultNotStarted {
				t.Fatalf("RecordLate got %+v, want w1 giving up, with no token, not started", lates)
			}
			kept := h.outbox.contents()
			if storeDown != (len(kept) == 1) || storeDown && kept[0] != lates[0] {
				t.Errorf("outbox %+v, want the abandon kept only when the store did not take it", kept)
			}
		})
	}
}

// A waiter whose attempt went unanswered, then found the job held by
// another until it gave up, abandons the grant it may have had: that grant
// expired meanwhile and another waiter may have counted it as a crash.
func TestWaitGivenUpAfterAnUnansweredAttemptIsAbandoned(t *testing.T) {
	var logs bytes.Buffer
	h := newHarness(t, func(c *Config) { c.WaitTimeout = time.Second })
	h.log = &logs
	h.store.lateWithdraws = true
	h.start()
	h.clock.AwaitTimer(t, h.clock.Now().Add(retryDelay(testHeartbeat))) // both asks unanswered
	h.store.refuse(&leasestore.HeldError{Job: "nightly", Holder: "other", ExpiresIn: time.Hour})
	h.clock.Advance(retryDelay(testHeartbeat))
	<-h.held
	h.clock.Advance(time.Second)
	var wt *WaitTimeoutError
	if r := h.refused(); !errors.As(r.err, &wt) {
		t.Fatalf("Run error %v, want *WaitTimeoutError", r.err)
	}
	lates := h.store.recordedLate()
	if len(lates) != 1 || lates[0].Holder != "w1" || lates[0].Token != 0 || lates[0].Result != leasestore.ResultNotStarted {
		t.Fatalf("RecordLate got %+v, want w1 giving up, with no token, not started", lates)
	}
	if !strings.Contains(logs.String(), `"crash_withdrawn":true`) {
		t.Errorf("no line says the crash counted for the grant was withdrawn:\n%s", logs.String())
	}
}

func TestRefusalIsNotAbandoned(t *testing.T) {
	h := newHarness(t, nil)
	h.store.refuse(&leasestore.HeldError{Job: "nightly", Holder: "other", ExpiresIn: time.Hour})
	h.start()
	h.refused()
	if lates := h.store.recordedLate(); len(lates) != 0 {
		t.Errorf("RecordLate got %+v after an answered refusal, want nothing", lates)
	}
}

func TestJobControlStopSuspendsTheSupervisorUntilSIGCONT(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	c := h.waitStarted()
	c.stopped <- syscall.SIGTSTP // Ctrl-Z
	select {
	case sig := <-h.suspends:
		if sig != syscall.SIGTSTP {
			t.Errorf("the supervisor stopped itself with %s, want the child's SIGTSTP", sig)
		}
	case <-time.After(hangGuard):
		t.Fatal("the supervisor did not stop with its child")
	}
	h.signals <- syscall.SIGCONT // fg
	select {
	case <-c.continues:
	case <-time.After(hangGuard):
		t.Fatal("SIGCONT did not resume the child")
	}
	h.barrier()
	if got := c.received(); len(got) != 0 {
		t.Errorf("the group received %v; SIGCONT is not forwarded but resumes through Continue", got)
	}
	if ending, out := h.end(Exit{Code: 0}); ending.Reason != ChildExited || out.Result != leasestore.ResultCompleted {
		t.Errorf("ending %+v, outcome %+v; want a completed run", ending, out)
	}
}

func TestARunResumedAfterItsDeadlineIsNotContinued(t *testing.T) {
	h := newHarness(t, nil)
	h.store.grant(10)
	h.start()
	c := h.waitStarted()
	c.stopped <- syscall.SIGTSTP
	<-h.suspends
	h.clock.Advance(testSafety) // stopped past the safety window
	h.signals <- syscall.SIGCONT
	if got := c.next(t); got.sig != syscall.SIGKILL {
		t.Fatalf("group received %v, want SIGKILL", got)
	}
	h.barrier()
	select {
	case <-c.continues:
		t.Fatal("a child whose lease may be someone else's was continued")
	default:
	}
	if ending, _ := h.end(Exit{Code: -1, Signal: syscall.SIGKILL}); ending.Reason != LeaseLost {
		t.Errorf("ending %+v, want LeaseLost", ending)
	}
}

func TestSlowRenewalsAreWarnedAboutAndReported(t *testing.T) {
	// The renewal margin is --safety - --heartbeat = 500ms.
	var logs bytes.Buffer
	h := newHarness(t, nil)
	h.log = &logs
	h.store.grant(10)
	h.start()
	h.waitStarted()
	renewIn := func(rtt time.Duration) renewCall {
		t.Helper()
		c := h.nextRenew()
		h.clock.Advance(rtt)
		c.reply <- nil
		select {
		case <-h.wd.updates:
		case <-time.After(hangGuard):
			t.Fatal("a confirmed renewal did not move the deadline")
		}
		h.clock.AwaitTimer(t, c.at.Add(testHeartbeat))
		h.clock.Advance(c.at.Add(testHeartbeat).Sub(h.clock.Now()))
		return c
	}
	h.clock.Advance(testHeartbeat)
	renewIn(100 * time.Millisecond)
	if strings.Contains(logs.String(), "renewal round trip ") {
		t.Fatalf("warned about a round trip of a fifth of the margin:\n%s", logs.String())
	}
	if c := renewIn(300 * time.Millisecond); c.rtt != 100*time.Millisecond {
		t.Errorf("the renewal after a 100ms round trip reported %s", c.rtt)
	}
	warned := strings.Count(logs.String(), "renewal round trip ")
	if warned != 1 || !strings.Contains(logs.String(), "renewal round trip 300ms is 60% of the renewal margin (--safety 1.5s - --heartbeat 1s = 500ms)") {
		t.Fatalf("%d warnings, want one naming the figures and the flags:\n%s", warned, logs.String())
	}
	if c := renewIn(310 * time.Millisecond); c.rtt != 300*time.Millisecond {
		t.Errorf("the renewal after a 300ms round trip reported %s", c.rtt)
	}
	if n := strings.Count(logs.String(), "renewal round trip "); n != 1 {
		t.Errorf("%d warnings after a second round trip at the same level, want still one", n)
	}
	renewIn(420 * time.Millisecond)
	if n := strings.Count(logs.String(), "renewal round trip "); n != 2 || !strings.Contains(logs.String(), "84% of the renewal margin") {
		t.Errorf("%d warnings, want a second one past four fifths of the margin:\n%s", n, logs.String())
	}
	h.nextRenew().reply <- nil
	h.end(Exit{Code: 0})
}

// groupNotingStore is a store whose holders share this host: it is told
// each run's process group, on notes, and answers once proceed is closed.
type groupNotingStore struct {
	*fakeStore
	err     error
	notes   chan groupNote
	proceed chan struct{}
}

// groupNote is one NoteGroup call.
type groupNote struct {
	token int64
	pgid  int
}

// groupNoting makes f a groupNotingStore whose notes all succeed at once.
func groupNoting(f *fakeStore) leasestore.Driver {
	proceed := make(chan struct{})
	close(proceed)
	return groupNotingStore{fakeStore: f, notes: make(chan groupNote, 1), proceed: proceed}
}

func (s groupNotingStore) NoteGroup(l *leasestore.Lease, pgid int) error {
	s.notes <- groupNote{l.Token, pgid}
	<-s.proceed
	return s.err
}

func TestTheChildsGroupIsNotedBeforeItStarts(t *testing.T) {
	// A store whose holders share the host learns the group the child
	// joins before it starts; a note that fails stops nothing, as the
	// lease then only expires later.
	for _, noteErr := range []error{nil, errors.New("disk full")} {
		t.Run(fmt.Sprint(noteErr), func(t *testing.T) {
			h := newHarness(t, nil)
			notes, proceed := make(chan groupNote, 1), make(chan struct{})
			h.storeAs = func(f *fakeStore) leasestore.Driver {
				return groupNotingStore{fakeStore: f, err: noteErr, notes: notes, proceed: proceed}
			}
			h.store.grant(10)
			h.start()
			var note groupNote
			select {
			case note = <-notes:
			case <-time.After(hangGuard):
				t.Fatal("the child's group was never noted")
			}
			select {
			case <-h.started:
				t.Fatal("the child started before its group was noted")
			default:
			}
			close(proceed)
			c := h.waitStarted()
			if note.token != 10 || note.pgid != h.wd.Group() || c.pgid != note.pgid {
				t.Errorf("noted token %d group %d, child in group %d; want token 10, the watchdog's group %d", note.token, note.pgid, c.pgid, h.wd.Group())
			}
			if _, out := h.end(Exit{Code: 0}); out.Result != leasestore.ResultCompleted {
				t.Errorf("outcome %v, want completed", out.Result)
			}
		})
	}
}

// A grant whose store could not keep the run's expectation (a registry
// older than expectations) starts the child all the same, with a warning
// that the job is not watched for being overdue.
func TestExpectationDroppedIsWarned(t *testing.T) {
	var logs bytes.Buffer
	h := newHarness(t, nil)
	h.log = &logs
	h.store.queue(func(req leasestore.AcquireRequest) (*leasestore.Lease, error) {
		l := h.store.grantNow(req, 10)
		l.ExpectDropped = true
		return l, nil
	})
	h.start()
	h.waitStarted()
	h.end(Exit{Code: 0})
	if !strings.Contains(logs.String(), "--expect-every is not kept") {
		t.Errorf("no warning that the expectation was not kept:\n%s", logs.String())
	}
}
