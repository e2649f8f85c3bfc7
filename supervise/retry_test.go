package supervise

import (
	"errors"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// threeQuarters is a deterministic Jitter within [d/2, d].
func threeQuarters(d time.Duration) time.Duration { return d - d/4 }

func TestEqualJitterStaysWithinHalfToFull(t *testing.T) {
	for _, d := range []time.Duration{minRetry, retryDelay(testHeartbeat), maxRetry} {
		seen := map[time.Duration]bool{}
		for range 1000 {
			j := equalJitter(d)
			if j < d/2 || j > d {
				t.Fatalf("equalJitter(%s) = %s, want within [%s, %s]", d, j, d/2, d)
			}
			seen[j] = true
		}
		if len(seen) < 2 {
			t.Errorf("equalJitter(%s) always returned the same wait: a fleet would retry in lockstep", d)
		}
	}
}

func TestRenewRetryAfterAStoreErrorIsJittered(t *testing.T) {
	h := newHarness(t, nil)
	h.jitter = threeQuarters
	h.store.grant(10)
	h.start()
	h.waitStarted()
	h.clock.Advance(testHeartbeat)
	failed := h.nextRenew()
	failed.reply <- &leasestore.UnavailableError{Op: "renew", Err: errors.New("connection refused")}
	retryAt := failed.at.Add(threeQuarters(retryDelay(testHeartbeat)))
	h.clock.AwaitTimer(t, retryAt)
	h.clock.Advance(retryAt.Sub(h.clock.Now()))
	if r := h.renewOK(); !r.at.Equal(retryAt) {
		t.Errorf("renewal retried %s after the failure, want the jittered %s", r.at.Sub(failed.at), retryAt.Sub(failed.at))
	}
	h.end(Exit{Code: 0})
}

func TestReleaseRetryAfterAStoreErrorIsJittered(t *testing.T) {
	h := newHarness(t, nil)
	h.jitter = threeQuarters
	h.store.grant(10)
	h.store.failReleases(&leasestore.UnavailableError{Op: "release", Err: errors.New("connection refused")})
	h.start()
	h.waitStarted()
	ended := h.clock.Now()
	h.child.done <- Exit{Code: 0}
	retryAt := ended.Add(threeQuarters(retryDelay(testHeartbeat)))
	h.clock.AwaitTimer(t, retryAt)
	h.clock.Advance(retryAt.Sub(ended))
	if _, out := h.wait(); out.Result != leasestore.ResultCompleted {
		t.Errorf("released %+v on the retry, want completed", out)
	}
}

func TestWaitRetryAfterAStoreErrorIsJittered(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Wait = true })
	h.jitter = threeQuarters
	h.store.refuse(&leasestore.HeldError{Job: "nightly", Holder: "other", ExpiresIn: time.Second})
	h.store.refuse(&leasestore.UnavailableError{Op: "acquire", Err: errors.New("connection refused")})
	h.store.grant(11)
	h.start()
	<-h.held
	h.clock.AwaitTimer(t, h.clock.Now().Add(time.Second+waitMargin))
	h.clock.Advance(time.Second + waitMargin) // the holder's TTL: try again, and the store fails
	retry := threeQuarters(retryDelay(testHeartbeat))
	h.clock.AwaitTimer(t, h.clock.Now().Add(retry))
	h.clock.Advance(retry)
	h.waitStarted()
	h.end(Exit{Code: 0})
}
