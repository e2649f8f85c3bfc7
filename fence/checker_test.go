package fence

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

var patterns = []Pattern{Authoritative, BoundedStaleness, WriteThrough}

// accept asserts that c accepts token for job.
func accept(t *testing.T, c *Checker, job string, token int64) {
	t.Helper()
	if err := c.Check(t.Context(), job, token); err != nil {
		t.Fatalf("Check(%s, %d) = %v, want accepted", job, token, err)
	}
}

// refuse asserts that c refuses token for job as stale and returns why.
func refuse(t *testing.T, c *Checker, job string, token int64) *StaleError {
	t.Helper()
	err := c.Check(t.Context(), job, token)
	var se *StaleError
	if !errors.As(err, &se) || !errors.Is(err, ErrStale) {
		t.Fatalf("Check(%s, %d) = %v, want a *StaleError", job, token, err)
	}
	if se.Job != job || se.Token != token {
		t.Errorf("StaleError %+v names another job or token than %s %d", se, job, token)
	}
	return se
}

// storeChecks runs check and returns how many times it asked the store.
func storeChecks(c *Checker, check func()) uint64 {
	before := c.Stats().StoreChecks
	check()
	return c.Stats().StoreChecks - before
}

func TestEveryPatternRefusesTheZombie(t *testing.T) {
	for _, p := range patterns {
		t.Run(p.String(), func(t *testing.T) {
			s := newFakeStore()
			c, _ := checker(t, s, Options{Pattern: p})
			old := s.grant("job")
			accept(t, c, "job", old)
			cur := s.grant("job")
			accept(t, c, "job", cur)
			se := refuse(t, c, "job", old)
			if se.Newest != cur || !se.Live || se.FromStore {
				t.Errorf("StaleError %+v, want newest %d live, decided from memory", se, cur)
			}
			if !strings.Contains(se.Error(), fmt.Sprint(cur)) {
				t.Errorf("message %q does not name the newer token", se.Error())
			}
		})
	}
}

// Kleppmann's rule: once a token is known, no lower one is accepted, even
// when the store, having lost its data and with its clock stepped back,
// vouches for it.
func TestEveryPatternKeepsItsHighWaterMark(t *testing.T) {
	for _, p := range patterns {
		t.Run(p.String(), func(t *testing.T) {
			s := newFakeStore()
			c, _ := checker(t, s, Options{Pattern: p})
			high := s.grant("job")
			accept(t, c, "job", high)
			s.set("job", high-5, true)
			if err := s.CheckToken(t.Context(), "job", high-5); err != nil {
				t.Fatalf("the store does not vouch for the lower token: %v", err)
			}
			if n := storeChecks(c, func() { refuse(t, c, "job", high-5) }); n != 0 {
				t.Errorf("a token below the mark cost %d store checks, want 0", n)
			}
		})
	}
}

// A token nobody granted (above the store's current one) is refused, and
// does not raise the mark: the real holder keeps writing.
func TestEveryPatternRefusesATokenNeverGranted(t *testing.T) {
	for _, p := range patterns {
		t.Run(p.String(), func(t *testing.T) {
			s := newFakeStore()
			c, _ := checker(t, s, Options{Pattern: p})
			cur := s.grant("job")
			accept(t, c, "job", cur)
			se := refuse(t, c, "job", cur+1000)
			if !se.FromStore || se.Newest != cur {
				t.Errorf("StaleError %+v, want the store's answer with newest %d", se, cur)
			}
			if !strings.Contains(se.Error(), "never granted") {
				t.Errorf("message %q does not say the token was never granted", se.Error())
			}
			accept(t, c, "job", cur)
		})
	}
}

func TestAuthoritativeAsksTheStoreForEveryAcceptance(t *testing.T) {
	s := newFakeStore()
	c, _ := checker(t, s, Options{})
	cur := s.grant("job")
	if n := storeChecks(c, func() {
		for range 3 {
			accept(t, c, "job", cur)
		}
	}); n != 3 {
		t.Errorf("3 acceptances asked the store %d times, want 3", n)
	}
	s.end("job")
	if se := refuse(t, c, "job", cur); !se.FromStore || se.Live {
		t.Errorf("StaleError %+v after the run ended, want the store's answer, not live", se)
	}
	// A run that ended never comes back: the checker remembers it.
	if n := storeChecks(c, func() { refuse(t, c, "job", cur) }); n != 0 {
		t.Errorf("a token whose run ended asked the store %d times again, want 0", n)
	}
	s.down = &leasestore.UnavailableError{Op: "check token", Err: errors.New("connection refused")}
	err := c.Check(t.Context(), "other", 5)
	if !errors.Is(err, leasestore.ErrUnavailable) || errors.Is(err, ErrStale) {
		t.Errorf("Check with the store down = %v, want ErrUnavailable", err)
	}
	if st := c.Stats(); st.Accepted != 3 || st.Stale != 2 || st.Failed != 1 || st.Jobs != 2 {
		t.Errorf("Stats = %+v, want 3 accepted, 2 stale, 1 failed, 2 jobs", st)
	}
}

func TestBoundedStalenessAcceptsFromMemoryWithinTheBound(t *testing.T) {
	s := newFakeStore()
	c, clock := checker(t, s, Options{Pattern: BoundedStaleness, MaxStaleness: 5 * time.Second})
	cur := s.grant("job")
	if n := storeChecks(c, func() { accept(t, c, "job", cur) }); n != 1 {
		t.Fatalf("the first check asked the store %d times, want 1", n)
	}
	clock.Advance(4 * time.Second)
	if n := storeChecks(c, func() { accept(t, c, "job", cur) }); n != 0 {
		t.Errorf("a check 4s after the confirmation asked the store %d times, want 0", n)
	}

	// The run's lease is lost and no newer token has reached the checker:
	// within the bound, the checker does not know (the documented window).
	s.end("job")
	accept(t, c, "job", cur)
	clock.Advance(time.Second)
	if se := refuse(t, c, "job", cur); !se.FromStore {
		t.Errorf("StaleError %+v once the bound passed, want the store's answer", se)
	}
	// The store said the run ended: no run comes back from that.
	if n := storeChecks(c, func() { refuse(t, c, "job", cur) }); n != 0 {
		t.Errorf("a token whose run ended asked the store %d times again, want 0", n)
	}
}

// The seed's example: with 41 cached, 30 is refused at once and 42 is
// checked with the store.
func TestBoundedStalenessSeedExample(t *testing.T) {
	s := newFakeStore()
	c, _ := checker(t, s, Options{Pattern: BoundedStaleness})
	s.set("job", 41, true)
	accept(t, c, "job", 41)
	if n := storeChecks(c, func() { refuse(t, c, "job", 30) }); n != 0 {
		t.Errorf("token 30 against a cached 41 asked the store %d times, want 0", n)
	}
	s.set("job", 42, true)
	if n := storeChecks(c, func() { accept(t, c, "job", 42) }); n != 1 {
		t.Errorf("token 42 against a cached 41 asked the store %d times, want 1", n)
	}
	refuse(t, c, "job", 41)
}

func TestWriteThroughAnswersFromTheFeed(t *testing.T) {
	s := newFakeStore()
	c, _ := checker(t, s, Options{Pattern: WriteThrough})
	first := s.grant("job")
	if n := storeChecks(c, func() { accept(t, c, "job", first) }); n != 0 {
		t.Errorf("the first check asked the store %d times: the watch's read should answer it", n)
	}
	second := s.grant("job")
	if n := storeChecks(c, func() {
		refuse(t, c, "job", first)
		accept(t, c, "job", second)
	}); n != 0 {
		t.Errorf("checks after a published grant asked the store %d times, want 0", n)
	}
	s.end("job")
	if se := refuse(t, c, "job", second); se.FromStore || se.Live {
		t.Errorf("StaleError %+v after a published end, want a refusal from memory, not live", se)
	}

	// A grant still on its way: the token above the feed's is checked with
	// the store.
	s.mu.Lock()
	s.cut = true
	s.mu.Unlock()
	third := s.grant("job")
	s.mu.Lock()
	s.cut = false
	s.mu.Unlock()
	if n := storeChecks(c, func() { accept(t, c, "job", third) }); n != 1 {
		t.Errorf("a token above the feed's asked the store %d times, want 1", n)
	}
}

// With the feed lost, or its heartbeat failing for MaxLag, the checker asks
// the store instead of accepting what it remembers.
func TestWriteThroughFallsBackWhenTheFeedIsCut(t *testing.T) {
	t.Run("connection lost", func(t *testing.T) {
		s := newFakeStore()
		c, _ := checker(t, s, Options{Pattern: WriteThrough})
		old := s.grant("job")
		accept(t, c, "job", old)
		s.lose()
		s.set("job", old+10, true) // a grant the lost connection missed
		if se := refuse(t, c, "job", old); !se.FromStore {
			t.Errorf("StaleError %+v, want the store's answer", se)
		}
		s.setCut(false) // the feed is back and reads the state again
		if n := storeChecks(c, func() { accept(t, c, "job", old+10) }); n != 0 {
			t.Errorf("a check after the feed came back asked the store %d times, want 0", n)
		}
	})

	t.Run("heartbeat stopped", func(t *testing.T) {
		s := newFakeStore()
		c, clock := checker(t, s, Options{Pattern: WriteThrough, Heartbeat: time.Second, MaxLag: 3 * time.Second})
		old := s.grant("job")
		accept(t, c, "job", old)
		s.setCut(true)
		zombie := old
		cur := s.grant("job") // not delivered
		// Until MaxLag has passed since the last good heartbeat, the memory
		// is trusted: the documented window.
		for range 2 {
			beat(t, c, clock)
		}
		if n := storeChecks(c, func() { accept(t, c, "job", zombie) }); n != 0 {
			t.Errorf("within MaxLag the check asked the store %d times, want 0", n)
		}
		beat(t, c, clock)
		if se := refuse(t, c, "job", zombie); !se.FromStore || se.Newest != cur {
			t.Errorf("StaleError %+v past MaxLag, want the store's answer naming %d", se, cur)
		}
		accept(t, c, "job", cur)

		s.setCut(false)
		beat(t, c, clock)
		if n := storeChecks(c, func() { accept(t, c, "job", cur) }); n != 0 {
			t.Errorf("after a good heartbeat the check asked the store %d times, want 0", n)
		}
	})
}

// A store that lost the job's data reads back token 0: write-through then
// refuses the token it knew, as the store would.
func TestWriteThroughReadOfAWipedStore(t *testing.T) {
	s := newFakeStore()
	c, _ := checker(t, s, Options{Pattern: WriteThrough})
	old := s.grant("job")
	accept(t, c, "job", old)
	s.lose()
	s.set("job", 0, false)
	s.setCut(false)
	if se := refuse(t, c, "job", old); se.FromStore || se.Newest != old || se.Live {
		t.Errorf("StaleError %+v, want a refusal from memory: newest %d, not live", se, old)
	}
}

func TestAdmitOrdersWritesWithinTheProcess(t *testing.T) {
	s := newFakeStore()
	c, _ := checker(t, s, Options{})
	old := s.grant("job")
	doneOld, err := c.Admit(t.Context(), "job", old)
	if err != nil {
		t.Fatalf("Admit(%d): %v", old, err)
	}
	cur := s.grant("job")

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.Admit(cancelled, "job", cur); err != nil {
		// The store is not asked with a cancelled context by the fake, so
		// the check passes and the wait for the older write ends at once.
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Admit(%d) while %d writes, cancelled = %v, want context.Canceled", cur, old, err)
		}
	} else {
		t.Fatalf("Admit(%d) returned while a write with %d was admitted", cur, old)
	}

	admitted := make(chan error, 1)
	var doneCur func()
	go func() {
		var err error
		doneCur, err = c.Admit(t.Context(), "job", cur)
		admitted <- err
	}()
	// The older token is refused from the moment the newer one was checked.
	for {
		if err := c.Check(t.Context(), "job", old); err != nil {
			break
		}
	}
	select {
	case err := <-admitted:
		t.Fatalf("Admit(%d) returned (%v) before the write with %d was done", cur, err, old)
	default:
	}
	doneOld()
	doneOld() // a second call does nothing
	select {
	case err := <-admitted:
		if err != nil {
			t.Fatalf("Admit(%d) after the older write was done: %v", cur, err)
		}
	case <-time.After(hangGuard):
		t.Fatalf("Admit(%d) still waits after the older write was done", cur)
	}
	if _, err := c.Admit(t.Context(), "job", old); !errors.Is(err, ErrStale) {
		t.Errorf("Admit(%d) after %d was admitted = %v, want ErrStale", old, cur, err)
	}
	doneCur()
	if st := c.Stats(); st.Failed != 1 {
		t.Errorf("Stats = %+v, want the cancelled admission counted as failed", st)
	}
}

func TestCheckerForgetsTheLeastRecentlyCheckedJobs(t *testing.T) {
	s := newFakeStore()
	c, clock := checker(t, s, Options{MaxJobs: 10})
	busy := s.grant("busy")
	done, err := c.Admit(t.Context(), "busy", busy)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	for i := range 30 {
		clock.Advance(time.Millisecond)
		job := fmt.Sprintf("job-%d", i)
		accept(t, c, job, s.grant(job))
	}
	if n := c.Stats().Jobs; n > 10 {
		t.Errorf("%d jobs remembered, want at most 10", n)
	}
	// The busy job, oldest of all, was kept: its mark still refuses.
	s.set("busy", busy-5, true)
	if n := storeChecks(c, func() { refuse(t, c, "busy", busy-5) }); n != 0 {
		t.Errorf("the busy job was forgotten: %d store checks", n)
	}
}

func TestCheckRejectsInvalidInput(t *testing.T) {
	c, _ := checker(t, newFakeStore(), Options{})
	for _, tc := range []struct {
		job   string
		token int64
	}{{"", 1}, {"bad job", 1}, {"job", 0}, {"job", -3}} {
		if err := c.Check(t.Context(), tc.job, tc.token); !errors.Is(err, ErrInvalid) {
			t.Errorf("Check(%q, %d) = %v, want ErrInvalid", tc.job, tc.token, err)
		}
	}
}

func TestCheckAfterClose(t *testing.T) {
	for _, p := range patterns {
		c, _ := checker(t, newFakeStore(), Options{Pattern: p})
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Check(t.Context(), "job", 1); !errors.Is(err, ErrClosed) {
			t.Errorf("%s: Check after Close = %v, want ErrClosed", p, err)
		}
		if err := c.Close(); err != nil {
			t.Errorf("%s: second Close: %v", p, err)
		}
	}
}

// checkOnly is a store without a token feed.
type checkOnly struct{ s *fakeStore }

func (c checkOnly) CheckToken(ctx context.Context, job string, token int64) error {
	return c.s.CheckToken(ctx, job, token)
}

func TestNewValidatesOptions(t *testing.T) {
	tests := []struct {
		opts Options
		want string
	}{
		{Options{Pattern: 7}, "unknown pattern"},
		{Options{Pattern: BoundedStaleness, MaxStaleness: -time.Second}, "negative"},
		{Options{MaxJobs: -1}, "negative"},
		{Options{MaxStaleness: time.Second}, "MaxStaleness applies to the bounded-staleness pattern"},
		{Options{Pattern: BoundedStaleness, Heartbeat: time.Second}, "apply to the write-through pattern"},
		{Options{Pattern: WriteThrough, Heartbeat: time.Second, MaxLag: time.Second}, "must be longer than Heartbeat"},
		{Options{Pattern: WriteThrough, Heartbeat: 2 * time.Second, MaxLag: time.Second}, "must be longer than Heartbeat"},
	}
	for _, tc := range tests {
		if _, err := New(newFakeStore(), tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error saying %q", tc.opts, err, tc.want)
		}
	}
	if _, err := New(checkOnly{newFakeStore()}, Options{Pattern: WriteThrough}); err == nil || !strings.Contains(err.Error(), "token feed") {
		t.Errorf("New(write-through, a store without feed) = %v, want an error naming the token feed", err)
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New(nil store) succeeded")
	}
}

// stuckFeed is a store whose watches never start.
type stuckFeed struct{ *fakeStore }

func (stuckFeed) WatchTokens(ctx context.Context, _ string, _ func(leasestore.TokenState)) (leasestore.TokenWatch, error) {
	<-ctx.Done()
	return nil, &leasestore.UnavailableError{Op: "watch tokens", Err: ctx.Err()}
}

// A watch that cannot start holds a check up for one heartbeat at most; the
// store answers it.
func TestWriteThroughAsksTheStoreWhenTheWatchCannotStart(t *testing.T) {
	s := stuckFeed{newFakeStore()}
	c, _ := checker(t, s, Options{Pattern: WriteThrough, Heartbeat: 20 * time.Millisecond, MaxLag: time.Second})
	cur := s.grant("job")
	ctx, cancel := context.WithTimeout(t.Context(), hangGuard)
	defer cancel()
	if err := c.Check(ctx, "job", cur); err != nil {
		t.Fatalf("Check with the watch stuck: %v, want accepted by the store within a heartbeat", err)
	}
	if n := c.Stats().StoreChecks; n != 1 {
		t.Errorf("the check asked the store %d times, want 1", n)
	}
}

// Under concurrent checks, grants and feed updates, no check accepts a token
// lower than one accepted before it started (Kleppmann's rule, raced).
func TestConcurrentChecksNeverGoBack(t *testing.T) {
	for _, p := range patterns {
		t.Run(p.String(), func(t *testing.T) {
			s := newFakeStore()
			c, err := New(s, Options{Pattern: p})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var granted, accepted atomic.Int64
			granted.Store(s.grant("job"))
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for i := 0; i < 200; i++ {
					granted.Store(s.grant("job"))
				}
				close(stop)
			})
			for range 4 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						floor := accepted.Load()
						token := granted.Load() - 10*rand.Int64N(3) // the current token or one of the two before
						if c.Check(t.Context(), "job", token) != nil {
							continue
						}
						if token < floor {
							t.Errorf("accepted token %d after %d had been accepted", token, floor)
						}
						for {
							cur := accepted.Load()
							if token <= cur || accepted.CompareAndSwap(cur, token) {
								break
							}
						}
					}
				})
			}
			wg.Wait()
		})
	}
}
