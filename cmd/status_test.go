package cmd

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasectl/leasectl/leasestore"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files in testdata/ with the current output")

// oncallNow is the fixed clock of the on-call command tests.
var oncallNow = time.Date(2026, 3, 1, 2, 14, 7, 0, time.UTC)

// stubStore answers with canned data and records the operator actions it
// receives; every call fails with err when it is set.
type stubStore struct {
	err         error
	crashes     []leasestore.Crash
	quarantined []leasestore.Quarantine
	statuses    map[string]*leasestore.JobStatus
	leases      []leasestore.Holder
	current     int64 // CheckToken: the current live token
	notes       map[string]leasestore.Note
	overdue     []leasestore.Overdue
	notices     []leasestore.Notice // put, in order
	closed      bool
}

func (s *stubStore) PutNotices(_ context.Context, notices []leasestore.Notice) error {
	if s.err != nil {
		return s.err
	}
	s.notices = append(s.notices, notices...)
	return nil
}

func (s *stubStore) ClaimNotices(context.Context, string, int, time.Duration) ([]leasestore.Notice, error) {
	return nil, s.err
}

func (s *stubStore) SettleNotice(context.Context, string, string, leasestore.Settlement) error {
	return leasestore.ErrNoticeNotHeld
}

func (s *stubStore) ListNotices(context.Context) ([]leasestore.Notice, error) {
	return s.notices, s.err
}

func (s *stubStore) Expect(_ context.Context, job string, x *leasestore.Expectation, note leasestore.Note) error {
	if s.err != nil {
		return s.err
	}
	if s.notes == nil {
		s.notes = map[string]leasestore.Note{}
	}
	s.notes[job] = leasestore.Note{By: note.By, Reason: x.Detail(note)}
	return nil
}

func (s *stubStore) Overdue(context.Context) ([]leasestore.Overdue, error) { return s.overdue, s.err }

func (s *stubStore) Acquire(context.Context, leasestore.AcquireRequest) (*leasestore.Lease, error) {
	return nil, errors.New("stub: Acquire is not used by the on-call commands")
}

func (s *stubStore) Renew(context.Context, *leasestore.Lease) error {
	return errors.New("stub: Renew is not used by the on-call commands")
}

func (s *stubStore) Release(context.Context, *leasestore.Lease, leasestore.Outcome) error {
	return errors.New("stub: Release is not used by the on-call commands")
}

func (s *stubStore) Subscribe(context.Context, string, string) (leasestore.Subscription, error) {
	return nil, errors.New("stub: Subscribe is not used by the on-call commands")
}

func (s *stubStore) Limits() leasestore.Limits { return leasestore.Limits{MaxSlots: 1} }

func (s *stubStore) Leave(context.Context, string, string) error {
	return errors.New("stub: Leave is not used by the on-call commands")
}

func (s *stubStore) RecordLate(context.Context, leasestore.LateOutcome) (leasestore.Correction, error) {
	return leasestore.Correction{}, errors.New("stub: RecordLate is not used by the on-call commands")
}

func (s *stubStore) StartTokens(context.Context, *leasestore.TokenHub) (leasestore.TokenSource, error) {
	return nil, errors.New("stub: the token feed is not used by the on-call commands")
}

func (s *stubStore) Scan(context.Context) ([]leasestore.Crash, error) { return s.crashes, s.err }

func (s *stubStore) Quarantined(context.Context) ([]leasestore.Quarantine, error) {
	return s.quarantined, s.err
}

func (s *stubStore) Quarantine(_ context.Context, job string, note leasestore.Note) error {
	if s.err != nil {
		return s.err
	}
	s.note(job, note)
	return nil
}

func (s *stubStore) Jobs(_ context.Context, prefix string, limit int) ([]string, error) {
	return leasestore.SelectJobs(slices.Collect(maps.Keys(s.statuses)), prefix, limit), s.err
}

func (s *stubStore) Stop(_ context.Context, job string, note leasestore.Note) error {
	if s.err != nil {
		return s.err
	}
	if st := s.statuses[job]; st == nil || st.Holder == nil {
		return leasestore.ErrNotRunning
	}
	s.note(job, note)
	return nil
}

func (s *stubStore) ReleaseQuarantine(_ context.Context, job string, note leasestore.Note) error {
	if s.err != nil {
		return s.err
	}
	if st := s.statuses[job]; st == nil || st.Quarantine == nil {
		return leasestore.ErrNotQuarantined
	}
	s.note(job, note)
	return nil
}

func (s *stubStore) note(job string, note leasestore.Note) {
	if s.notes == nil {
		s.notes = map[string]leasestore.Note{}
	}
	s.notes[job] = note
}

func (s *stubStore) Status(_ context.Context, job string) (*leasestore.JobStatus, error) {
	if s.err != nil {
		return nil, s.err
	}
	if st := s.statuses[job]; st != nil {
		return st, nil
	}
	return &leasestore.JobStatus{Job: job, State: leasestore.StateIdle, Now: oncallNow}, nil
}

func (s *stubStore) Leases(context.Context) ([]leasestore.Holder, error) { return s.leases, s.err }

func (s *stubStore) Counts(context.Context) (leasestore.Counts, error) {
	return leasestore.Counts{InFlight: len(s.leases), Quarantined: len(s.quarantined)}, s.err
}

func (s *stubStore) CheckToken(_ context.Context, job string, token int64) error {
	if s.err != nil {
		return s.err
	}
	if token == s.current {
		return nil
	}
	return &leasestore.StaleTokenError{Job: job, Token: token, Current: s.current, Live: true}
}

func (s *stubStore) Close() error {
	s.closed = true
	return nil
}

// unavailable is how a store reports that it cannot be reached.
var unavailable = &leasestore.UnavailableError{Op: "scan", Err: errors.New("dial tcp 127.0.0.1:1: connect: connection refused")}

// sampleStore holds a small but complete on-call scene: two crashed runs,
// two quarantined jobs, two live leases, and the status of jobs in every
// state.
func sampleStore() *stubStore {
	running := &leasestore.Holder{
		Job: "nightly-report", Worker: "db-1:4242:a1b2c3", Host: "db-1", PID: 4242, Token: 1772331247000001, Attempt: 17,
		Command: []string{"./report.sh", "--full"}, StartedAt: oncallNow.Add(-3*time.Minute - 12*time.Second), ExpiresAt: oncallNow.Add(21*time.Second + 500*time.Millisecond),
		LastRTT: 1234 * time.Microsecond,
	}
	backup := leasestore.Holder{
		Job: "backup/db", Worker: "db-2:77:ffee01", Host: "db-2", PID: 77, Token: 1772330000000042, Attempt: 3,
		Command: []string{"pg_dump", "main"}, StartedAt: oncallNow.Add(-2*time.Hour - 5*time.Minute), ExpiresAt: oncallNow.Add(850 * time.Millisecond),
	}
	history := []leasestore.Event{
		{At: oncallNow.Add(-26 * time.Hour), Kind: leasestore.EventAcquired, Worker: "db-1:4100:9f9f9f", Token: 1772240000000001},
		{At: oncallNow.Add(-26*time.Hour + 72*time.Second), Kind: leasestore.EventReleased, Worker: "db-1:4100:9f9f9f", Token: 1772240000000001, Detail: "completed exit 0 after 1m12s"},
		{At: running.StartedAt, Kind: leasestore.EventAcquired, Worker: running.Worker, Token: running.Token},
	}
	encoders := []leasestore.Holder{
		{Job: "encode", Worker: "media-1:5150:aa0001", Host: "media-1", PID: 5150, Token: 1772331100000001, Attempt: 40,
			Command: []string{"encode"}, StartedAt: oncallNow.Add(-4 * time.Minute), ExpiresAt: oncallNow.Add(25 * time.Second)},
		{Job: "encode", Worker: "media-2:6160:bb0002", Host: "media-2", PID: 6160, Token: 1772331200000002, Attempt: 41, Slot: 2,
			Command: []string{"encode"}, StartedAt: oncallNow.Add(-2 * time.Minute), ExpiresAt: oncallNow.Add(12 * time.Second)},
	}
	quarantine := leasestore.Quarantine{
		Job: "billing-sync", Crashes: 3, Since: oncallNow.Add(-42 * time.Minute), Reason: "3 consecutive crashes", By: "leasectl",
		LastHolder: "app-3:901:0c0ffe", LastHost: "app-3",
	}
	return &stubStore{
		current: running.Token,
		crashes: []leasestore.Crash{
			{
				Job: "etl:orders", Holder: "app-1:3131:beef01", Host: "app-1", PID: 3131, Token: 1772331000000007,
				Command: []string{"etl", "orders"}, StartedAt: oncallNow.Add(-5*time.Minute - 12*time.Second),
				StaleSince: oncallNow.Add(-42*time.Second - 500*time.Millisecond), DetectedAt: oncallNow, Crashes: 1,
			},
			{
				Job: "billing-sync", Holder: "app-3:901:0c0ffe", Host: "app-3", PID: 901, Token: 1772330999000003,
				Command: []string{"billing", "sync"}, StartedAt: oncallNow.Add(-time.Hour),
				StaleSince: oncallNow.Add(-9*time.Minute - 3*time.Second), DetectedAt: oncallNow, Crashes: 3, Quarantined: true,
			},
		},
		quarantined: []leasestore.Quarantine{
			quarantine,
			{Job: "legacy-export", Since: oncallNow.Add(-50 * time.Hour), Reason: "upstream API returns garbage (INC-1234)", By: "alice@ops-1"},
		},
		leases: []leasestore.Holder{backup, *running},
		statuses: map[string]*leasestore.JobStatus{
			"nightly-report": {
				Job: "nightly-report", State: leasestore.StateRunning, Now: oncallNow, Holder: running, Region: "us-east-1",
				LastToken: running.Token, Attempts: 17, Crashes: 1, MaxCrashes: 3,
				LastOutcome: &leasestore.LastOutcome{
					Outcome: leasestore.Outcome{Result: leasestore.ResultCompleted, Duration: 72 * time.Second},
					Worker:  "db-1:4100:9f9f9f", Token: 1772240000000001, FinishedAt: oncallNow.Add(-26*time.Hour + 72*time.Second),
				},
				LastSuccess: oncallNow.Add(-26*time.Hour + 72*time.Second),
				History:     history,
				Expect:      &leasestore.Expectation{Every: 24 * time.Hour, Grace: time.Hour, Since: oncallNow.Add(-30 * 24 * time.Hour)},
			},
			"etl:orders": {
				Job: "etl:orders", State: leasestore.StateCrashed, Now: oncallNow,
				Crashed: &leasestore.Crash{
					Job: "etl:orders", Holder: "app-1:3131:beef01", Host: "app-1", PID: 3131, Token: 1772331000000007,
					Command: []string{"etl", "orders"}, StartedAt: oncallNow.Add(-5*time.Minute - 12*time.Second),
					StaleSince: oncallNow.Add(-42*time.Second - 500*time.Millisecond),
				},
				LastToken: 1772331000000007, Attempts: 4, Crashes: 0, MaxCrashes: 3,
				LastOutcome: &leasestore.LastOutcome{
					Outcome: leasestore.Outcome{Result: leasestore.ResultFailed, ExitCode: -1, Signal: 15, Duration: 4*time.Second + 200*time.Millisecond, Reason: "max-runtime"},
					Worker:  "app-1:2999:aaaa01", Token: 1772330000000005, FinishedAt: oncallNow.Add(-3 * time.Hour),
				},
				History: []leasestore.Event{
					{At: oncallNow.Add(-5*time.Minute - 12*time.Second), Kind: leasestore.EventAcquired, Worker: "app-1:3131:beef01", Token: 1772331000000007},
				},
			},
			"encode": {
				Job: "encode", State: leasestore.StateRunning, Now: oncallNow, Holder: &encoders[0], Holders: encoders, Slots: 3,
				Queue: []leasestore.Waiter{
					{Worker: "media-3:7170:cc0003", Host: "media-3", PID: 7170, Since: oncallNow.Add(-90 * time.Second), Until: oncallNow.Add(20 * time.Second)},
					{Worker: "media-1:5200:dd0004", Host: "media-1", PID: 5200, Since: oncallNow.Add(-30 * time.Second), Until: oncallNow.Add(25 * time.Second)},
				},
				LastToken: 1772331200000002, Attempts: 41, MaxCrashes: 3,
			},
			"billing-sync": {
				Job: "billing-sync", State: leasestore.StateQuarantined, Now: oncallNow,
				LastToken: 1772330999000003, Attempts: 9, Crashes: 3, MaxCrashes: 3, Quarantine: &quarantine,
				History: []leasestore.Event{
					{At: oncallNow.Add(-42 * time.Minute), Kind: leasestore.EventCrashed, Worker: "app-3:901:0c0ffe", Token: 1772330999000003, Detail: "supervisor vanished"},
					{At: oncallNow.Add(-42 * time.Minute), Kind: leasestore.EventQuarantined, Worker: "app-3:901:0c0ffe", Token: 1772330999000003, Detail: "3 consecutive crashes"},
				},
			},
		},
	}
}

// outputMode is one of the three ways an on-call command writes.
type outputMode struct {
	name string
	tty  bool
	json bool
}

var outputModes = []outputMode{{"tty", true, false}, {"piped", false, false}, {"json", false, true}}

// testStreams returns IOStreams writing to buffers.
func testStreams(tty bool) (*IOStreams, *bytes.Buffer, *bytes.Buffer) {
	var out, errOut bytes.Buffer
	return &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut, StdoutTTY: tty, StderrTTY: tty}, &out, &errOut
}

// opener returns an OpenStore that opens the store d serves as a command
// does: each call a client of its own over d's data, which one portable
// Store wraps, never d itself wrapped again by every call.
func opener(d leasestore.Driver) func(context.Context) (*leasestore.Store, error) {
	return func(context.Context) (*leasestore.Store, error) { return leasestore.New(&stubClient{d}), nil }
}

// stubClient is one client of a stub store: its own Driver value over the
// stub's data.
type stubClient struct{ leasestore.Driver }

func fixedNow() time.Time { return oncallNow }

// assertGolden compares stdout (and stderr, when not empty) with
// testdata/<name>.golden, or rewrites it with -update.
func assertGolden(t *testing.T, name string, stdout, stderr string) {
	t.Helper()
	got := stdout
	if stderr != "" {
		got += "--- stderr ---\n" + stderr
	}
	path := filepath.Join("testdata", name+".golden")
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/ -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test ./cmd/ -update rewrites it after review)\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

func testFactory() *Factory {
	ios, _, _ := testStreams(false)
	return &Factory{IO: ios, Globals: &GlobalOptions{}, Now: fixedNow}
}

// execute runs c on argv, as the root command would, and returns the exit
// code its error maps to.
func executeArgs(c *cobra.Command, argv ...string) int {
	if argv == nil {
		argv = []string{} // nil would make cobra read os.Args
	}
	c.SetArgs(argv)
	c.SetOut(io.Discard)
	c.SetErr(io.Discard)
	return exitCode(c.Execute())
}

func TestNewCmdStatus(t *testing.T) {
	for _, tc := range []struct {
		argv     []string
		wantCode int
		want     StatusOptions
	}{
		{argv: []string{"nightly-report"}, want: StatusOptions{Job: "nightly-report"}},
		{argv: []string{"backup/db", "--json"}, want: StatusOptions{Job: "backup/db", JSON: true}},
		{argv: []string{}, wantCode: exitUsage},
		{argv: []string{"a", "b"}, wantCode: exitUsage},
		{argv: []string{"bad job"}, wantCode: exitUsage},
		{argv: []string{"j", "--bogus"}, wantCode: exitUsage},
	} {
		var got *StatusOptions
		code := executeArgs(NewCmdStatus(testFactory(), func(o *StatusOptions) error { got = o; return nil }), tc.argv...)
		if code != tc.wantCode {
			t.Errorf("status %q: exit %d, want %d", tc.argv, code, tc.wantCode)
			continue
		}
		if code == 0 && (got.Job != tc.want.Job || got.JSON != tc.want.JSON) {
			t.Errorf("status %q: options %+v, want %+v", tc.argv, got, tc.want)
		}
	}
}

func TestStatusOutput(t *testing.T) {
	for _, job := range []string{"nightly-report", "etl:orders", "billing-sync", "encode"} {
		for _, m := range outputModes {
			ios, out, errOut := testStreams(m.tty)
			s := sampleStore()
			err := statusRun(context.Background(), &StatusOptions{IO: ios, Now: fixedNow, OpenStore: opener(s), Job: job, JSON: m.json})
			if err != nil {
				t.Fatalf("status %s (%s): %v", job, m.name, err)
			}
			if !s.closed {
				t.Errorf("status %s left the store open", job)
			}
			name := strings.NewReplacer(":", "-", "/", "-").Replace(job)
			assertGolden(t, "status_"+name+"_"+m.name, out.String(), errOut.String())
		}
	}
}

// TestStatusOfAJobNeverSeen: a job the store has no record of (a typo)
// exits 1 with one line on stderr saying so, and prints nothing on stdout,
// in every output mode.
func TestStatusOfAJobNeverSeen(t *testing.T) {
	for _, m := range outputModes {
		ios, out, _ := testStreams(m.tty)
		err := statusRun(context.Background(), &StatusOptions{IO: ios, Now: fixedNow, OpenStore: opener(sampleStore()), Job: "never-seen", JSON: m.json})
		if code, msg := exitCode(err), errorMessage(err); code != exitFailure || !strings.Contains(msg, `job "never-seen" was never seen by this store`) || strings.Contains(msg, "\n") {
			t.Errorf("%s: exit %d, message %q; want 1 saying the job was never seen", m.name, code, msg)
		}
		if out.Len() != 0 {
			t.Errorf("%s: stdout %q, want nothing", m.name, out)
		}
	}
}

// TestStoreUnavailableExits69 covers every on-call command: a store that
// cannot be reached is exit status 69 with one line saying why.
func TestStoreUnavailableExits69(t *testing.T) {
	ios, _, _ := testStreams(false)
	open := opener(&stubStore{err: unavailable})
	ctx := context.Background()
	q := &QuarantineOptions{IO: ios, Now: fixedNow, OpenStore: open, Job: "j", Reason: "r", By: "alice@ops-1"}
	for name, run := range map[string]func() error{
		"scan":   func() error { return scanRun(ctx, &ScanOptions{IO: ios, Now: fixedNow, OpenStore: open}) },
		"status": func() error { return statusRun(ctx, &StatusOptions{IO: ios, Now: fixedNow, OpenStore: open, Job: "j"}) },
		"ls":     func() error { return lsRun(ctx, &LsOptions{IO: ios, Now: fixedNow, OpenStore: open}) },
		"token check": func() error {
			return tokenCheckRun(ctx, &TokenCheckOptions{IO: ios, Now: fixedNow, OpenStore: open, Job: "j", Token: 5})
		},
		"quarantine list":    func() error { return quarantineListRun(ctx, q) },
		"quarantine show":    func() error { return quarantineShowRun(ctx, q) },
		"quarantine release": func() error { return quarantineReleaseRun(ctx, q) },
		"quarantine add":     func() error { return quarantineAddRun(ctx, q) },
	} {
		var msg bytes.Buffer
		if code := reportError(&msg, run()); code != exitUnavailable {
			t.Errorf("%s: exit %d, want %d", name, code, exitUnavailable)
		}
		if lines := strings.Count(msg.String(), "\n"); lines != 1 || !strings.Contains(msg.String(), "connection refused") {
			t.Errorf("%s: stderr %q, want one line with the cause", name, msg.String())
		}
	}
}

// TestOpenStoreFailureIsReported covers a store that cannot even be
// opened: its error is returned as is, for exit.go to map.
func TestOpenStoreFailureIsReported(t *testing.T) {
	ios, _, _ := testStreams(false)
	bad := usageError(errors.New(`invalid --store "ftp://x": use redis://, rediss:// or file://`))
	err := lsRun(context.Background(), &LsOptions{IO: ios, Now: fixedNow,
		OpenStore: func(context.Context) (*leasestore.Store, error) { return nil, bad }})
	if code := exitCode(err); code != exitUsage {
		t.Fatalf("exit %d, want %d", code, exitUsage)
	}
}
