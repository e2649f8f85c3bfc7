package leasestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// countingDriver counts the calls that reach it and answers them; any
// method it does not define panics on the nil Driver it embeds, which no
// test here reaches.
type countingDriver struct {
	Driver
	limits Limits
	calls  int
	closes int
}

func (d *countingDriver) Limits() Limits { return d.limits }

func (d *countingDriver) Acquire(_ context.Context, req AcquireRequest) (*Lease, error) {
	d.calls++
	return &Lease{Job: req.Job, Holder: req.Holder, Token: 1, TTL: req.TTL}, nil
}

func (d *countingDriver) Status(_ context.Context, job string) (*JobStatus, error) {
	d.calls++
	return &JobStatus{Job: job, State: StateIdle}, nil
}

func (d *countingDriver) Jobs(context.Context, string, int) ([]string, error) {
	d.calls++
	return nil, nil
}

func (d *countingDriver) Scan(context.Context) ([]Crash, error) {
	d.calls++
	return nil, nil
}

func (d *countingDriver) SyncTokens(context.Context) error {
	d.calls++
	return nil
}

func (d *countingDriver) Close() error {
	d.closes++
	return nil
}

// groupDriver is a countingDriver that notes process groups.
type groupDriver struct {
	*countingDriver
	noted int
}

func (d *groupDriver) NoteGroup(l *Lease, pgid int) error {
	d.noted = pgid
	return nil
}

func request(ttl time.Duration, slots int) AcquireRequest {
	return AcquireRequest{Job: "nightly", Holder: "w1", TTL: ttl, EvidenceTTL: time.Hour, MaxCrashes: 3, Slots: slots}
}

// The portable Store refuses what the driver's limits rule out before the
// driver hears of it, each with a usage error naming the limit.
func TestStoreRefusesWhatTheDriverCannotHonour(t *testing.T) {
	d := &countingDriver{limits: Limits{MinTTL: 2 * time.Second, MaxTTL: time.Hour, MaxSlots: 4}}
	s := New(d)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		req  AcquireRequest
		want string // "" for granted
	}{
		{"in range", request(2*time.Second, 4), ""},
		{"no TTL", request(0, 1), "0s is not positive"},
		{"below the minimum", request(1999*time.Millisecond, 1), "below the store's minimum lease TTL 2s"},
		{"above the maximum", request(time.Hour+time.Millisecond, 1), "above the store's maximum lease TTL 1h0m0s"},
		{"too many slots", request(time.Minute, 5), "5 is not 0 to the 4 this store runs per job"},
		{"negative slots", request(time.Minute, -1), "-1 is not 0 to the 4"},
	} {
		before := d.calls
		_, err := s.Acquire(ctx, tc.req)
		var re *RequestError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (!errors.As(err, &re) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want a *RequestError saying %q", tc.name, err, tc.want)
		case tc.want != "" && d.calls != before:
			t.Errorf("%s: the driver was asked", tc.name)
		}
	}
	bad := request(time.Minute, 1)
	bad.Job = "a b"
	var ide *InvalidJobIDError
	if _, err := s.Acquire(ctx, bad); !errors.As(err, &ide) {
		t.Errorf("Acquire of job %q: %v, want an *InvalidJobIDError", bad.Job, err)
	}
	if _, err := s.Status(ctx, ""); !errors.As(err, &ide) {
		t.Errorf("Status of no job: %v, want an *InvalidJobIDError", err)
	}
	if _, err := s.Jobs(ctx, "a*", 0); !errors.As(err, &ide) {
		t.Errorf("Jobs with prefix a*: %v, want an *InvalidJobIDError", err)
	}
	if _, err := s.Jobs(ctx, "", 0); err != nil {
		t.Errorf("Jobs without a prefix: %v", err)
	}
	if d.calls != 2 {
		t.Errorf("the driver was asked %d times, want twice (the grant in range, the listing)", d.calls)
	}
}

// After Close every call fails as the store unavailable, naming ErrClosed,
// without reaching the driver, which is closed once.
func TestStoreAfterClose(t *testing.T) {
	d := &countingDriver{limits: Limits{MaxSlots: 1}}
	s := New(d)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil || d.closes != 1 {
		t.Errorf("a second Close: %v, driver closed %d times; want nil and once", err, d.closes)
	}
	ctx := context.Background()
	_, acqErr := s.Acquire(ctx, request(time.Minute, 1))
	_, stErr := s.Status(ctx, "nightly")
	_, scanErr := s.Scan(ctx)
	for _, err := range []error{acqErr, stErr, scanErr, s.SyncTokens(ctx)} {
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrClosed) {
			t.Errorf("a call after Close: %v, want ErrUnavailable and ErrClosed", err)
		}
	}
	if d.calls != 0 {
		t.Errorf("the driver was asked %d times after Close", d.calls)
	}
}

// NoteGroup reaches a driver that notes groups, and is nothing on others.
func TestStoreNoteGroup(t *testing.T) {
	l := &Lease{Job: "nightly", Holder: "w1", Token: 1}
	if err := New(&countingDriver{}).NoteGroup(l, 42); err != nil {
		t.Errorf("NoteGroup on a driver without groups: %v", err)
	}
	gd := &groupDriver{countingDriver: &countingDriver{}}
	if err := New(gd).NoteGroup(l, 42); err != nil || gd.noted != 42 {
		t.Errorf("NoteGroup: %v, driver noted %d; want group 42 noted", err, gd.noted)
	}
}

// Unavailable keeps a driver's explanation to its first line without its
// secrets, keeps the cause reachable, and wraps an error once.
func TestUnavailable(t *testing.T) {
	err := Unavailable("acquire", "Redis at h:1 refused s3cret\nsecond line", io.EOF, "s3cret")
	if got, want := err.Error(), "store unavailable during acquire: Redis at h:1 refused xxxxx"; got != want {
		t.Errorf("Unavailable = %q, want %q", got, want)
	}
	var de *DriverError
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, io.EOF) || !errors.As(err, &de) {
		t.Errorf("Unavailable(%v) does not match ErrUnavailable, its cause and *DriverError", err)
	}
	if again := Unavailable("renew", "other words", err); again != err {
		t.Errorf("Unavailable of an unavailable error = %v, want it as it was", again)
	}
}

// ExplainTransport names the failures of the way to a backend, and leaves
// any other to the driver.
func TestExplainTransport(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	read := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	for _, tc := range []struct {
		err  error
		want string // "" for not a transport failure
	}{
		{context.DeadlineExceeded, "no answer from Redis at h:1 before the deadline"},
		{&net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, "no answer from Redis at h:1 before the deadline"},
		{fmt.Errorf("reading: %w", context.Canceled), "cancelled while talking to Redis"},
		{io.ErrUnexpectedEOF, "Redis at h:1 closed the connection"},
		{dial, "cannot connect to Redis at h:1: connection refused"},
		{read, "lost the connection to Redis at h:1: connection reset by peer"},
		{errors.New("WRONGTYPE"), ""},
	} {
		got, ok := ExplainTransport("Redis at h:1", "Redis", tc.err)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("ExplainTransport(%v) = %q, %v; want %q", tc.err, got, ok, tc.want)
		}
	}
}

// feedDriver is a countingDriver whose token source is the hub tests'
// source, counting its starts.
type feedDriver struct {
	*countingDriver
	src    *source
	starts int
}

func (d *feedDriver) StartTokens(context.Context, *TokenHub) (TokenSource, error) {
	d.starts++
	return d.src, nil
}

// The Store starts the driver's token source once, for its first watch,
// shares it among its watches, and stops them at Close, before closing the
// driver.
func TestStoreStartsTheTokenSourceOnce(t *testing.T) {
	d := &feedDriver{countingDriver: &countingDriver{}, src: newSource()}
	s := New(d)
	ctx := context.Background()
	if err := s.SyncTokens(ctx); err != nil || d.starts != 0 {
		t.Fatalf("SyncTokens without a watch: %v, source started %d times; want nil and none", err, d.starts)
	}
	var got []TokenState
	d.src.set("a", 7, true)
	for _, job := range []string{"a", "b"} {
		if _, err := s.WatchTokens(ctx, job, func(st TokenState) { got = append(got, st) }); err != nil {
			t.Fatal(err)
		}
	}
	if d.starts != 1 || len(got) != 2 || got[0].Token != 7 {
		t.Fatalf("two watches: source started %d times, states %+v; want once, a read of each job", d.starts, got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if d.src.followed["a"] != 0 || d.src.followed["b"] != 0 {
		t.Errorf("after Close the source still follows %v", d.src.followed)
	}
	if _, err := s.WatchTokens(ctx, "a", func(TokenState) {}); !errors.Is(err, ErrClosed) || d.starts != 1 {
		t.Errorf("WatchTokens after Close: %v, source started %d times; want ErrClosed and no new start", err, d.starts)
	}
}
