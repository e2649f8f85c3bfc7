package fence

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasectl/leasectl/clock/fakeclock"
	"github.com/leasectl/leasectl/leasestore"
)

// hangGuard bounds every wait of a test for an event.
const hangGuard = 5 * time.Second

// fakeStore is a store of tokens with a token feed whose delivery and
// heartbeat a test can cut.
type fakeStore struct {
	mu      sync.Mutex
	jobs    map[string]*fakeJob
	watches map[string][]func(leasestore.TokenState)
	cut     bool  // the feed delivers nothing and its heartbeat fails
	down    error // every CheckToken fails with it
	asked   chan int64
}

type fakeJob struct {
	token int64
	live  bool
}

func newFakeStore() *fakeStore {
	return &fakeStore{jobs: map[string]*fakeJob{}, watches: map[string][]func(leasestore.TokenState){}}
}

func (s *fakeStore) job(job string) *fakeJob {
	if s.jobs[job] == nil {
		s.jobs[job] = &fakeJob{}
	}
	return s.jobs[job]
}

// grant grants job's next token and publishes it, unless the feed is cut.
func (s *fakeStore) grant(job string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.job(job)
	j.token += 10
	j.live = true
	s.publish(job, leasestore.TokenState{Token: j.token, Live: true})
	return j.token
}

// end ends job's current run and publishes it, unless the feed is cut.
func (s *fakeStore) end(job string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.job(job)
	j.live = false
	s.publish(job, leasestore.TokenState{Token: j.token})
}

// set makes the store's state of job token and live without publishing it,
// as a store that lost its data, or a lost message, would.
func (s *fakeStore) set(job string, token int64, live bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*s.job(job) = fakeJob{token, live}
}

// lose tells every watch that the feed was interrupted.
func (s *fakeStore) lose() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for job, fns := range s.watches {
		for _, fn := range fns {
			fn(leasestore.TokenState{Job: job, Lost: true})
		}
	}
}

// setCut cuts or restores the feed; restoring reads every watched job again.
func (s *fakeStore) setCut(cut bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut = cut
	if !cut {
		for job := range s.watches {
			j := s.job(job)
			for _, fn := range s.watches[job] {
				fn(leasestore.TokenState{Job: job, Token: j.token, Live: j.live, Read: true})
			}
		}
	}
}

func (s *fakeStore) publish(job string, st leasestore.TokenState) {
	if s.cut {
		return
	}
	st.Job = job
	for _, fn := range s.watches[job] {
		fn(st)
	}
}

func (s *fakeStore) CheckToken(_ context.Context, job string, token int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.asked != nil {
		s.asked <- token
	}
	if s.down != nil {
		return s.down
	}
	j := s.job(job)
	if token == j.token && j.live {
		return nil
	}
	return &leasestore.StaleTokenError{Job: job, Token: token, Current: j.token, Live: j.live}
}

func (s *fakeStore) WatchTokens(_ context.Context, job string, fn func(leasestore.TokenState)) (leasestore.TokenWatch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watches[job] = append(s.watches[job], fn)
	j := s.job(job)
	fn(leasestore.TokenState{Job: job, Token: j.token, Live: j.live, Read: true})
	return fakeWatch{s, job}, nil
}

func (s *fakeStore) SyncTokens(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		return &leasestore.UnavailableError{Op: "sync tokens", Err: errors.New("feed cut")}
	}
	return nil
}

type fakeWatch struct {
	s   *fakeStore
	job string
}

func (w fakeWatch) Close() error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	delete(w.s.watches, w.job)
	return nil
}

// checker returns a Checker of s with opts and a fake clock, closed when
// the test ends; with WriteThrough, once its first heartbeat is done.
func checker(t *testing.T, s Store, opts Options) (*Checker, *fakeclock.Clock) {
	t.Helper()
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	opts.Clock = clock
	c, err := New(s, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if opts.Pattern == WriteThrough {
		clock.AwaitTimer(t, clock.Now().Add(c.heartbeat))
	}
	return c, clock
}

// beat moves clock one heartbeat on and returns once c's heartbeat loop
// has made its heartbeat and waits for the next one.
func beat(t *testing.T, c *Checker, clock *fakeclock.Clock) {
	t.Helper()
	clock.Advance(c.heartbeat)
	clock.AwaitTimer(t, clock.Now().Add(c.heartbeat))
}
