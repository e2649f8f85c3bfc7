package leasestore

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// hotDriver answers the hot-path calls at once; blockRenew, when set,
// holds Renew until it is closed, after telling entered. It counts the
// calls that run after its Close began, and tells closing of its Close.
type hotDriver struct {
	Driver
	entered    chan struct{}
	blockRenew chan struct{}
	closing    chan struct{}
	closed     atomic.Bool
	late       atomic.Int32
}

func (d *hotDriver) Limits() Limits { return Limits{MaxSlots: 1} }

func (d *hotDriver) Renew(context.Context, *Lease) error {
	if d.blockRenew != nil {
		close(d.entered)
		<-d.blockRenew
	}
	if d.closed.Load() {
		d.late.Add(1)
	}
	return nil
}

func (d *hotDriver) CheckToken(context.Context, string, int64) error { return nil }

func (d *hotDriver) Close() error {
	d.closed.Store(true)
	if d.closing != nil {
		close(d.closing)
	}
	return nil
}

// The hot paths, Renew at every heartbeat and CheckToken at every fenced
// write, allocate nothing in the portable Store.
func TestHotPathsDoNotAllocate(t *testing.T) {
	s := New(&hotDriver{})
	ctx := context.Background()
	l := &Lease{Job: "nightly-backup/db1", Holder: "w", Token: 7}
	if n := testing.AllocsPerRun(1000, func() { _ = s.Renew(ctx, l) }); n != 0 {
		t.Errorf("Renew: %v allocs", n)
	}
	if n := testing.AllocsPerRun(1000, func() { _ = s.CheckToken(ctx, "nightly-backup/db1", 7) }); n != 0 {
		t.Errorf("CheckToken: %v allocs", n)
	}
}

// BenchmarkStoreRenew and BenchmarkDriverRenew are the portable Store's
// overhead on the heartbeat's call; BenchmarkStoreCheckToken and
// BenchmarkDriverCheckToken on a fenced write's.
func BenchmarkStoreRenew(b *testing.B) {
	s := New(&hotDriver{})
	ctx, l := context.Background(), &Lease{Job: "nightly-backup/db1", Holder: "w", Token: 7}
	for b.Loop() {
		_ = s.Renew(ctx, l)
	}
}

func BenchmarkDriverRenew(b *testing.B) {
	var d Driver = &hotDriver{}
	ctx, l := context.Background(), &Lease{Job: "nightly-backup/db1", Holder: "w", Token: 7}
	for b.Loop() {
		_ = d.Renew(ctx, l)
	}
}

func BenchmarkStoreCheckToken(b *testing.B) {
	s := New(&hotDriver{})
	ctx := context.Background()
	for b.Loop() {
		_ = s.CheckToken(ctx, "nightly-backup/db1", 7)
	}
}

func BenchmarkDriverCheckToken(b *testing.B) {
	var d Driver = &hotDriver{}
	ctx := context.Background()
	for b.Loop() {
		_ = d.CheckToken(ctx, "nightly-backup/db1", 7)
	}
}

func BenchmarkStoreCheckTokenParallel(b *testing.B) {
	s := New(&hotDriver{})
	ctx := context.Background()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = s.CheckToken(ctx, "nightly-backup/db1", 7)
		}
	})
}

// Close waits for the calls in flight before it closes the driver, and
// refuses the calls made meanwhile: a driver runs no call after its Close,
// as the Driver doc promises.
func TestCloseWaitsForTheCallsInFlight(t *testing.T) {
	d := &hotDriver{entered: make(chan struct{}), blockRenew: make(chan struct{}), closing: make(chan struct{})}
	s := New(d)
	renewed := make(chan error)
	go func() { renewed <- s.Renew(context.Background(), &Lease{Job: "nightly"}) }()
	<-d.entered
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	for !errors.Is(s.CheckToken(context.Background(), "nightly", 7), ErrClosed) {
		runtime.Gosched()
	}
	select {
	case <-d.closing:
		t.Fatal("the driver was closed while a call was in flight")
	case <-closed:
		t.Fatal("Close returned while a call was in flight")
	case <-time.After(100 * time.Millisecond):
	}
	close(d.blockRenew)
	if err := <-renewed; err != nil {
		t.Fatal(err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if n := d.late.Load(); n != 0 {
		t.Errorf("the driver ran %d call(s) after its Close", n)
	}
	if err := s.Close(); err != nil {
		t.Errorf("closing again: %v", err)
	}
}

// failedStartDriver fails to start its token source with a plain error.
type failedStartDriver struct{ hotDriver }

func (*failedStartDriver) StartTokens(context.Context, *TokenHub) (TokenSource, error) {
	return nil, errors.New("cannot listen")
}

// A driver's failure to start its token source reaches the caller as the
// store unavailable, like its other failures.
func TestStartTokensFailureIsUnavailable(t *testing.T) {
	s := New(&failedStartDriver{})
	_, err := s.WatchTokens(context.Background(), "nightly", func(TokenState) {})
	if !errors.Is(err, ErrUnavailable) || err.Error() != "store unavailable during watch tokens: cannot listen" {
		t.Errorf("WatchTokens with a failed start: %v; want it unavailable", err)
	}
}
