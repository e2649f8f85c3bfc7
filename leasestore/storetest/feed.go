package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// TokenLog records what a token watch reports, for tests to await.
type TokenLog struct {
	mu      sync.Mutex
	states  []leasestore.TokenState
	changed chan struct{}
}

// NewTokenLog returns an empty log.
func NewTokenLog() *TokenLog { return &TokenLog{changed: make(chan struct{}, 1)} }

// Add records st; it is the fn a watch calls.
func (l *TokenLog) Add(st leasestore.TokenState) {
	l.mu.Lock()
	l.states = append(l.states, st)
	l.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// States returns what was recorded so far.
func (l *TokenLog) States() []leasestore.TokenState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]leasestore.TokenState(nil), l.states...)
}

// Last returns the newest state recorded, and false when there is none.
func (l *TokenLog) Last() (leasestore.TokenState, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.states) == 0 {
		return leasestore.TokenState{}, false
	}
	return l.states[len(l.states)-1], true
}

// Await waits until the newest state satisfies ok, failing the test after
// HangGuard; what describes the awaited state in the failure.
func (l *TokenLog) Await(t testing.TB, what string, ok func(leasestore.TokenState) bool) leasestore.TokenState {
	t.Helper()
	deadline := time.After(HangGuard)
	for {
		if st, found := l.Last(); found && ok(st) {
			return st
		}
		select {
		case <-l.changed:
		case <-deadline:
			t.Fatalf("no token state %s within %s; states: %+v", what, HangGuard, l.States())
		}
	}
}

// IsState returns a predicate for a state with token and live, not lost.
func IsState(token int64, live bool) func(leasestore.TokenState) bool {
	return func(st leasestore.TokenState) bool { return !st.Lost && st.Token == token && st.Live == live }
}

// Watch starts a watch of job through s, closed when the test ends, and
// returns its log.
func Watch(t testing.TB, s *leasestore.Store, job string) *TokenLog {
	t.Helper()
	log := NewTokenLog()
	w, err := s.WatchTokens(Ctx(t), job, log.Add)
	if err != nil {
		t.Fatalf("WatchTokens(%s): %v", job, err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return log
}

func testTokenFeed(t *testing.T, h fixture) {
	watcher := client(t, h.Fixture)
	holder := client(t, h.Fixture)
	heartbeat := func(t *testing.T) {
		t.Helper()
		if err := watcher.SyncTokens(Ctx(t)); err != nil {
			t.Fatalf("SyncTokens: %v", err)
		}
	}

	t.Run("first state is read", func(t *testing.T) {
		log := Watch(t, watcher, "never-seen")
		states := log.States()
		if len(states) != 1 || !states[0].Read || states[0].Lost || states[0].Token != 0 || states[0].Live || states[0].Job != "never-seen" {
			t.Fatalf("states on return of WatchTokens: %+v, want one read state of job never-seen with token 0, not live", states)
		}
		l := Acquire(t, holder, Request("held", "a", LongTTL))
		// On a Redis Cluster the grant's own message can still be on its way
		// over the cluster bus, and arrive after the read that includes it.
		log = Watch(t, watcher, "held")
		if st := log.States()[0]; !st.Read || !IsState(l.Token, true)(st) {
			t.Fatalf("first state of a held job: %+v, want a read of token %d, live", st, l.Token)
		}
	})

	t.Run("grants and ends", func(t *testing.T) {
		log := Watch(t, watcher, "job")
		l := Acquire(t, holder, Request("job", "a", LongTTL))
		log.Await(t, fmt.Sprintf("of the grant of %d", l.Token), IsState(l.Token, true))
		Release(t, holder, l, leasestore.ResultCompleted)
		log.Await(t, fmt.Sprintf("of the release of %d", l.Token), IsState(l.Token, false))

		// h.crashRun, not CrashRun: it waits until the store reports the
		// lease expired, which takes its MinTTL (etcd: 2 s) at least,
		// before Scan can count the crash.
		crashed := h.crashRun(t, holder, "job", "b", 10)
		log.Await(t, fmt.Sprintf("of the grant of %d", crashed.Token), IsState(crashed.Token, true))
		if _, err := holder.Scan(Ctx(t)); err != nil {
			t.Fatalf("Scan: %v", err)
		}
		log.Await(t, fmt.Sprintf("of the counted crash of %d", crashed.Token), IsState(crashed.Token, false))
		for _, st := range log.States() {
			if st.Job != "job" {
				t.Errorf("state %+v names another job", st)
			}
		}
	})

	t.Run("heartbeat is a barrier", func(t *testing.T) {
		log := Watch(t, watcher, "job")
		other := Watch(t, watcher, "other")
		for i := range 3 {
			l := Acquire(t, holder, Request("job", fmt.Sprintf("w%d", i), LongTTL))
			heartbeat(t)
			if st, _ := log.Last(); !IsState(l.Token, true)(st) {
				t.Fatalf("after SyncTokens the newest state is %+v, want the grant of %d made before it", st, l.Token)
			}
			Release(t, holder, l, leasestore.ResultFailed)
			heartbeat(t)
			if st, _ := log.Last(); !IsState(l.Token, false)(st) {
				t.Fatalf("after SyncTokens the newest state is %+v, want the release of %d made before it", st, l.Token)
			}
		}
		if st, _ := other.Last(); !IsState(0, false)(st) {
			t.Errorf("a job nobody touched reports %+v", st)
		}
	})

	t.Run("closed watch hears nothing", func(t *testing.T) {
		closing := NewTokenLog()
		w, err := watcher.WatchTokens(Ctx(t), "closed", closing.Add)
		if err != nil {
			t.Fatalf("WatchTokens: %v", err)
		}
		open := Watch(t, watcher, "closed")
		if err := w.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		before := len(closing.States())
		l := Acquire(t, holder, Request("closed", "a", LongTTL))
		heartbeat(t)
		if st, _ := open.Last(); !IsState(l.Token, true)(st) {
			t.Fatalf("the open watch's newest state %+v, want the grant of %d", st, l.Token)
		}
		if after := closing.States(); len(after) != before {
			t.Errorf("a closed watch was called: %+v", after[before:])
		}
	})
}

// testDriverWrappedOnce: a driver refuses to start its token feed for a
// second Store wrapping it, which would leave the first one's source
// running, never stopped.
func testDriverWrappedOnce(t *testing.T, h fixture) {
	d := h.Open(t)
	first := leasestore.New(d)
	t.Cleanup(func() { _ = first.Close() })
	if _, err := first.WatchTokens(Ctx(t), "job", func(leasestore.TokenState) {}); err != nil {
		t.Fatalf("WatchTokens: %v", err)
	}
	second := leasestore.New(d)
	_, err := second.WatchTokens(Ctx(t), "job", func(leasestore.TokenState) {})
	if !errors.Is(err, leasestore.ErrFeedStarted) || !errors.Is(err, leasestore.ErrUnavailable) {
		t.Errorf("WatchTokens through a second Store over the driver: %v, want ErrFeedStarted, unavailable", err)
	}
}
