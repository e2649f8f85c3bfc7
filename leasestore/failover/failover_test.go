package failover

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"time"
)

// hangGuard bounds a call in these tests, which never wait for it.
const hangGuard = 30 * time.Second

var (
	errBroken  = errors.New("connection reset")
	errRefusal = errors.New("not the holder")
)

func moveOnBroken(err error) bool { return errors.Is(err, errBroken) }

// cluster answers attempts by endpoint name: "silent" answers nothing until
// its attempt is cancelled, "broken" fails with errBroken, "refuses" with
// errRefusal, any other name answers with itself. It records the attempts
// in the order they were sent, and reports on cancelled the silent
// attempts that were cancelled.
type cluster struct {
	mu        sync.Mutex
	sent      []string
	cancelled chan string
}

func newCluster() *cluster { return &cluster{cancelled: make(chan string, 8)} }

func (c *cluster) attempt(ctx context.Context, name string) (string, error) {
	c.mu.Lock()
	c.sent = append(c.sent, name)
	c.mu.Unlock()
	switch name {
	case "silent":
		<-ctx.Done()
		c.cancelled <- name
		return "", ctx.Err()
	case "broken":
		return "", errBroken
	case "refuses":
		return "", errRefusal
	}
	return name, nil
}

func call(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

func TestDoSendsTheRequestOnWhenAnEndpointIsSilent(t *testing.T) {
	dir := t.TempDir()
	e := New([]string{"silent", "b", "c"}, dir)
	c := newCluster()
	got, err := Do(call(t), e, c.attempt, moveOnBroken)
	if err != nil || got != "b" {
		t.Fatalf("Do = %q, %v; want b's answer", got, err)
	}
	if !slices.Equal(c.sent, []string{"silent", "b"}) {
		t.Fatalf("attempts went to %v, want silent then b", c.sent)
	}
	if order := e.Order(); !slices.Equal(order, []int{1, 2, 0}) {
		t.Fatalf("order after the silent endpoint %v, want it last: [1 2 0]", order)
	}
	// A later process on the host reads the note.
	if order := New([]string{"silent", "b", "c"}, dir).Order(); !slices.Equal(order, []int{1, 2, 0}) {
		t.Fatalf("a new client's order %v, want the noted endpoint last: [1 2 0]", order)
	}
	// Once it answers, it is no longer noted.
	e.Answered(0)
	if order := New([]string{"silent", "b", "c"}, dir).Order(); !slices.Equal(order, []int{0, 1, 2}) {
		t.Fatalf("a new client's order %v after the endpoint answered, want [0 1 2]", order)
	}
}

func TestDoCancelsTheAttemptsItDidNotUse(t *testing.T) {
	c := newCluster()
	if _, err := Do(call(t), New([]string{"silent", "b"}, ""), c.attempt, moveOnBroken); err != nil {
		t.Fatal(err)
	}
	// The silent attempt ends (its connection closed) once b answered:
	// without the cancellation this waits out the hang guard.
	select {
	case <-c.cancelled:
	case <-time.After(hangGuard):
		t.Fatal("the silent endpoint's attempt was not cancelled after b answered")
	}
}

func TestDoMovesOnAtOnceAfterAFailure(t *testing.T) {
	// No deadline: the hedge bound is maxHedge; a failure must not wait
	// for it, so the broken endpoint is not noted silent.
	e := New([]string{"broken", "b"}, "")
	c := newCluster()
	got, err := Do(call(t), e, c.attempt, moveOnBroken)
	if err != nil || got != "b" {
		t.Fatalf("Do = %q, %v; want b's answer", got, err)
	}
	if order := e.Order(); !slices.Equal(order, []int{1, 0}) {
		t.Fatalf("order %v, want b first: [1 0]", order)
	}
	e.Answered(0)
	if order := e.Order(); !slices.Equal(order, []int{0, 1}) {
		t.Fatalf("order %v after broken answered, want [0 1]: a failure is not silence", order)
	}
}

func TestDoReturnsAnAnswerThatIsNotAFailure(t *testing.T) {
	c := newCluster()
	_, err := Do(call(t), New([]string{"refuses", "b"}, ""), c.attempt, moveOnBroken)
	if !errors.Is(err, errRefusal) || len(c.sent) != 1 {
		t.Fatalf("Do = %v after %v, want the refusal from the first endpoint alone", err, c.sent)
	}
}

func TestDoReturnsTheFirstFailureWhenAllFail(t *testing.T) {
	c := newCluster()
	_, err := Do(call(t), New([]string{"broken", "broken"}, ""), c.attempt, moveOnBroken)
	if !errors.Is(err, errBroken) || len(c.sent) != 2 {
		t.Fatalf("Do = %v after %v, want errBroken after both", err, c.sent)
	}
}

func TestDoStopsAtTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	c := newCluster()
	_, err := Do(ctx, New([]string{"silent", "silent"}, ""), c.attempt, func(error) bool { return true })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do with every endpoint silent = %v, want the deadline", err)
	}
}

func TestHedgeAfter(t *testing.T) {
	for _, tc := range []struct {
		left, min, max time.Duration // the context's time left; the bound expected within [min, max]
	}{
		{0, maxHedge, maxHedge},                             // no deadline
		{time.Hour, maxHedge, maxHedge},                     // --ttl 30s and longer: capped
		{2 * time.Second, 490 * time.Millisecond, maxHedge}, // --ttl 6s --heartbeat 1s --safety 3s: a quarter
		{time.Second, 240 * time.Millisecond, 250 * time.Millisecond},
		{10 * time.Millisecond, minHedge, minHedge}, // a window barely above the heartbeat
	} {
		ctx := t.Context()
		if tc.left > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, tc.left)
			defer cancel()
		}
		if d := HedgeAfter(ctx); d < tc.min || d > tc.max {
			t.Errorf("HedgeAfter with %s left = %s, want within [%s, %s]", tc.left, d, tc.min, tc.max)
		}
	}
}

// A single endpoint has nothing to try first instead: it is never noted
// silent, so a process that finds it silent costs the next nothing.
func TestASingleEndpointIsNeverNoted(t *testing.T) {
	dir := t.TempDir()
	c := newCluster()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := Do(ctx, New([]string{"silent"}, dir), c.attempt, moveOnBroken); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do on a silent single endpoint = %v, want the deadline", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a single silent endpoint left %d notes, want none", len(entries))
	}
}

// A single endpoint has nothing to hedge to: its attempt gets the caller's
// context as it is, on the caller's goroutine, and its answer or failure
// is the call's.
func TestDoRunsASingleEndpointsAttemptInPlace(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(call(t), key{}, "caller")
	var got context.Context
	v, err := Do(ctx, New([]string{"only"}, ""), func(actx context.Context, name string) (string, error) {
		got = actx
		return name, nil
	}, moveOnBroken)
	if err != nil || v != "only" {
		t.Fatalf("Do = %q, %v; want only, nil", v, err)
	}
	if got != ctx {
		t.Fatalf("the attempt got a context of its own (%v), want the caller's", got)
	}
	if _, err := Do(ctx, New([]string{"broken"}, ""), newCluster().attempt, moveOnBroken); !errors.Is(err, errBroken) {
		t.Fatalf("Do on a broken single endpoint = %v, want its failure", err)
	}
}

// An attempt that the caller's deadline cut short gave no answer: the
// endpoints silent past the bound stay noted.
func TestDoKeepsTheNotesWhenTheDeadlineCutsTheAttempts(t *testing.T) {
	dir := t.TempDir()
	c := newCluster()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	// moveOn accepts nothing: the deadline's error must still not count as
	// an endpoint's answer.
	_, err := Do(ctx, New([]string{"silent", "silent"}, dir), c.attempt, func(error) bool { return false })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do with every endpoint silent = %v, want the deadline", err)
	}
	// Both endpoints are named "silent": one note.
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("%d notes after the endpoint was silent until the deadline, want 1", len(entries))
	}
}
