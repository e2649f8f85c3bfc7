package leasestore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

// source is a TokenSource whose store is a map the test writes, and whose
// failures the test sets.
type source struct {
	mu       sync.Mutex
	states   map[string]TokenState
	readErr  error
	followed map[string]int // Follow calls minus Unfollow calls, by job
}

func newSource() *source {
	return &source{states: map[string]TokenState{}, followed: map[string]int{}}
}

func (s *source) Follow(_ context.Context, job string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.followed[job]++
	return nil
}

func (s *source) Unfollow(job string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.followed[job]--
}

func (s *source) Read(_ context.Context, job string) (TokenState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.readErr != nil {
		return TokenState{}, s.readErr
	}
	st := s.states[job]
	st.Job, st.Read = job, true
	return st, nil
}

func (s *source) Barrier(context.Context) error { return nil }

func (s *source) set(job string, token int64, live bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states[job] = TokenState{Token: token, Live: live}
}

// log records what a watch's fn was called with.
type log struct {
	mu     sync.Mutex
	states []TokenState
}

func (l *log) add(st TokenState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.states = append(l.states, st)
}

func (l *log) got() []TokenState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.states)
}

func open(t *testing.T, h *TokenHub, job string) (*log, TokenWatch) {
	t.Helper()
	l := &log{}
	w, err := h.Watch(t.Context(), job, l.add)
	if err != nil {
		t.Fatalf("Watch(%s): %v", job, err)
	}
	return l, w
}

func change(token int64, live bool) TokenState {
	return TokenState{Job: "job", Token: token, Live: live}
}

func read(token int64, live bool) TokenState {
	return TokenState{Job: "job", Token: token, Live: live, Read: true}
}

// A watch gets its first state read, then each change once, and not the
// changes a read already included or that arrive after a newer one.
func TestWatchGetsEachChangeOnce(t *testing.T) {
	src := newSource()
	src.set("job", 5, true)
	h := hubOf(src)
	l, _ := open(t, h, "job")
	for _, st := range []TokenState{
		change(5, true),  // the grant the read included
		change(4, false), // an older run's end, late
		change(5, false), // the end of the run read live
		change(5, true),  // its grant again, after its end: overtaken
		change(5, false), // repeated
		change(6, true),
	} {
		h.Publish(st)
	}
	want := []TokenState{read(5, true), change(5, false), change(6, true)}
	if got := l.got(); !slices.Equal(got, want) {
		t.Errorf("states %+v, want %+v", got, want)
	}
}

// A lost job's watches are told once, hear no change until they read
// again, and the heartbeat fails meanwhile.
func TestLostThenReadAgain(t *testing.T) {
	src := newSource()
	src.set("job", 5, true)
	h := hubOf(src)
	l, _ := open(t, h, "job")
	h.Lost()
	h.Lost("job")
	h.Publish(change(6, true)) // missed: the read will say it
	if err := h.Sync(t.Context()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Sync while lost: %v, want unavailable", err)
	}
	src.set("job", 6, true)
	if err := h.Reread(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	want := []TokenState{read(5, true), {Job: "job", Lost: true}, read(6, true)}
	if got := l.got(); !slices.Equal(got, want) {
		t.Errorf("states %+v, want %+v", got, want)
	}
	if err := h.Sync(t.Context()); err != nil {
		t.Errorf("Sync once read again: %v", err)
	}
}

// A job is followed while it has a watch; a watch whose first read fails
// is not made, and leaves the job unfollowed.
func TestFollowedWhileWatched(t *testing.T) {
	src := newSource()
	h := hubOf(src)
	_, a := open(t, h, "job")
	lb, b := open(t, h, "job")
	if n := src.followed["job"]; n != 1 {
		t.Errorf("two watches of a job: followed %d times, want 1", n)
	}
	_ = a.Close()
	h.Publish(change(7, true))
	if got := lb.got(); len(got) != 2 || got[1] != change(7, true) {
		t.Errorf("the watch left open got %+v, want its read and the grant of 7", got)
	}
	_ = b.Close()
	if n := src.followed["job"]; n != 0 {
		t.Errorf("no watch left: followed %d times, want 0", n)
	}

	src.readErr = &UnavailableError{Op: "read", Err: errors.New("down")}
	if _, err := h.Watch(t.Context(), "other", func(TokenState) {}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Watch with the read failing: %v, want unavailable", err)
	}
	if n := src.followed["other"]; n != 0 || len(h.Jobs()) != 0 {
		t.Errorf("after a failed watch: followed %d times, jobs %q; want none", n, h.Jobs())
	}
}

// A closed watch hears nothing, and a closed hub makes no watch.
func TestClosed(t *testing.T) {
	h := hubOf(newSource())
	l, w := open(t, h, "job")
	_ = w.Close()
	h.Publish(change(1, true))
	if got := l.got(); len(got) != 1 {
		t.Errorf("a closed watch got %+v after its read", got[1:])
	}
	h.Close()
	if _, err := h.Watch(t.Context(), "job", func(TokenState) {}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Watch on a closed hub: %v, want unavailable", err)
	}
}

// hubOf is a hub over src.
func hubOf(src TokenSource) *TokenHub {
	h := newTokenHub()
	h.attach(src)
	return h
}

// heldFollow is the test source with a Follow that tells entered and waits
// for release: a watch held between the hub's closed check and its add.
type heldFollow struct {
	*source
	entered, release chan struct{}
}

func (s heldFollow) Follow(ctx context.Context, job string) error {
	close(s.entered)
	<-s.release
	return s.source.Follow(ctx, job)
}

// A Watch that passed the closed check before Close, and is still
// following its job when Close returns, ends refused, its job no longer
// followed: no watch outlives the hub's Close.
func TestWatchRacingCloseEndsRefused(t *testing.T) {
	src := heldFollow{source: newSource(), entered: make(chan struct{}), release: make(chan struct{})}
	h := hubOf(src)
	watched := make(chan error)
	go func() {
		_, err := h.Watch(t.Context(), "job", func(TokenState) {})
		watched <- err
	}()
	<-src.entered
	h.Close()
	close(src.release)
	if err := <-watched; !errors.Is(err, ErrClosed) {
		t.Errorf("Watch across Close: %v, want ErrClosed", err)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if n := src.followed["job"]; n != 0 || len(h.Jobs()) != 0 {
		t.Errorf("after Close: job followed %d times, jobs %q; want none", n, h.Jobs())
	}
}
