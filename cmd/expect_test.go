package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/leasestore"
)

func TestNewCmdExpect(t *testing.T) {
	for _, tc := range []struct {
		argv     []string
		wantCode int
		every    time.Duration
		clear    bool
	}{
		{argv: []string{"nightly", "--every", "24h", "--grace", "1h"}, every: 24 * time.Hour},
		{argv: []string{"nightly", "--every", "1h"}, every: time.Hour},
		{argv: []string{"nightly", "--clear"}, clear: true},
		{argv: []string{"nightly"}, wantCode: exitUsage},
		{argv: []string{"nightly", "--clear", "--every", "1h"}, wantCode: exitUsage},
		{argv: []string{"nightly", "--every", "0s"}, wantCode: exitUsage},
		{argv: []string{"nightly", "--every", "1h", "--grace", "-1m"}, wantCode: exitUsage},
		{argv: []string{"nightly", "--every", "1500us"}, wantCode: exitUsage},
		{argv: []string{"bad job", "--every", "1h"}, wantCode: exitUsage},
		{argv: []string{"--every", "1h"}, wantCode: exitUsage},
	} {
		var got *ExpectOptions
		code := executeArgs(NewCmdExpect(testFactory(), func(o *ExpectOptions) error { got = o; return nil }), tc.argv...)
		if code != tc.wantCode {
			t.Errorf("expect %q: exit %d, want %d", tc.argv, code, tc.wantCode)
			continue
		}
		if code == 0 && (got.Every != tc.every || got.Clear != tc.clear || got.Job != "nightly" || got.By == "") {
			t.Errorf("expect %q: options %+v", tc.argv, got)
		}
	}
}

func TestExpectRecordsWhoAndWhy(t *testing.T) {
	ios, _, errOut := testStreams(false)
	s := &stubStore{}
	opts := &ExpectOptions{QuarantineOptions: quarantineOpts(ios, s, "nightly", false), Every: time.Hour, Grace: 10 * time.Minute}
	if err := expectRun(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	want := leasestore.Note{By: "alice@ops-1", Reason: "by alice@ops-1: every 1h0m0s grace 10m0s: fixed the input file (INC-1234)"}
	if got := s.notes["nightly"]; got != want {
		t.Errorf("the store got %+v, want %+v", got, want)
	}
	if !strings.Contains(errOut.String(), "job nightly must succeed every 1h0m0s: overdue 1h10m0s after its last success") {
		t.Errorf("confirmation %q", errOut.String())
	}
	ios, out, _ := testStreams(false)
	opts = &ExpectOptions{QuarantineOptions: quarantineOpts(ios, s, "nightly", true), Clear: true}
	if err := expectRun(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	var action map[string]any
	if err := json.Unmarshal(out.Bytes(), &action); err != nil || action["action"] != "expectation-cleared" {
		t.Errorf("--json: %s (%v), want the expectation-cleared action", out.String(), err)
	}
}

func TestRunExpectFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want *leasestore.Expectation
		code int
	}{
		{args: nil},
		{args: []string{"--expect-every", "1h", "--expect-grace", "5m"}, want: &leasestore.Expectation{Every: time.Hour, Grace: 5 * time.Minute}},
		{args: []string{"--expect-every", "24h"}, want: &leasestore.Expectation{Every: 24 * time.Hour}},
		{args: []string{"--expect-grace", "5m"}, code: exitUsage},
		{args: []string{"--expect-every", "0s"}, code: exitUsage},
		{args: []string{"--expect-every", "1h", "--expect-grace", "-1s"}, code: exitUsage},
	} {
		var got *RunOptions
		c := NewCmdRun(testFactory(), func(o *RunOptions) error { got = o; return nil })
		c.SetArgs(append(append([]string{"--job", "j"}, tc.args...), "--", "true"))
		c.SetOut(io.Discard)
		c.SetErr(io.Discard)
		err := c.Execute()
		if code := exitCode(err); code != tc.code {
			t.Errorf("run %q: exit %d (%v), want %d", tc.args, code, err, tc.code)
			continue
		}
		if tc.code == 0 && (got.Config.Expect == nil) != (tc.want == nil) || tc.want != nil && *got.Config.Expect != *tc.want {
			t.Errorf("run %q: expectation %+v, want %+v", tc.args, got.Config.Expect, tc.want)
		}
	}
}

// scan --fail-on exits 81 when the pass finds what it names, and says
// what; --overdue lists the overdue jobs after the crashes, and each is a
// warning in the log whatever the flags.
func TestScanOverdueAndFailOn(t *testing.T) {
	s := sampleStore()
	s.overdue = []leasestore.Overdue{{Job: "nightly-report", Expect: leasestore.Expectation{Every: 24 * time.Hour, Grace: time.Hour},
		LastSuccess: oncallNow.Add(-26 * time.Hour), Due: oncallNow.Add(-time.Hour), Now: oncallNow}}
	for _, tc := range []struct {
		failOn []string
		store  *stubStore
		code   int
		says   string
	}{
		{failOn: []string{"overdue"}, store: s, code: exitFound, says: "scan found 1 overdue (--fail-on)"},
		{failOn: []string{"crashed", "overdue", "quarantined"}, store: s, code: exitFound, says: "scan found 2 crashed, 1 overdue, 2 quarantined"},
		{failOn: []string{"overdue", "quarantined"}, store: &stubStore{}, code: 0},
		{failOn: nil, store: s, code: 0},
	} {
		ios, out, _ := testStreams(false)
		var logs strings.Builder
		opts := &ScanOptions{IO: ios, Now: fixedNow, OpenStore: opener(tc.store), FailOn: tc.failOn, Overdue: true, JSON: true,
			Logger: func() (zerolog.Logger, error) { return zerolog.New(&logs), nil }}
		err := scanRun(context.Background(), opts)
		if code := exitCode(err); code != tc.code || tc.says != "" && !strings.Contains(err.Error(), tc.says) {
			t.Errorf("--fail-on %v: exit %d (%v), want %d saying %q", tc.failOn, code, err, tc.code, tc.says)
		}
		var found struct {
			Crashes []map[string]any `json:"crashes"`
			Overdue []map[string]any `json:"overdue"`
		}
		if err := json.Unmarshal(out.Bytes(), &found); err != nil || len(found.Crashes) != len(tc.store.crashes) || len(found.Overdue) != len(tc.store.overdue) {
			t.Errorf("--fail-on %v: printed %s (%v)", tc.failOn, out.String(), err)
		}
		if len(tc.store.overdue) > 0 && !strings.Contains(logs.String(), "job nightly-report is overdue: last succeeded 1d2h ago, expected every 1d (grace 1h)") {
			t.Errorf("--fail-on %v: the log %q does not warn of the overdue job", tc.failOn, logs.String())
		}
	}
}

func TestNewCmdScanOverdueFlags(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		code int
	}{
		{argv: []string{"--overdue", "--fail-on", "overdue,quarantined"}},
		{argv: []string{"--fail-on", "crashed", "--fail-on", "overdue"}},
		{argv: []string{"--fail-on", "late"}, code: exitUsage},
		{argv: []string{"--watch", "--overdue"}, code: exitUsage},
		{argv: []string{"--watch", "--fail-on", "overdue"}, code: exitUsage},
	} {
		if code := executeArgs(NewCmdScan(testFactory(), func(*ScanOptions) error { return nil }), tc.argv...); code != tc.code {
			t.Errorf("scan %q: exit %d, want %d", tc.argv, code, tc.code)
		}
	}
}

// A store that cannot list overdue jobs (a registry older than them) still
// gets its crashes counted and its leases listed; asked for overdue jobs,
// scan fails instead.
func TestOverdueUnsupported(t *testing.T) {
	s := &overdueless{stubStore: sampleStore()}
	var logs strings.Builder
	ios, out, _ := testStreams(false)
	opts := &ScanOptions{IO: ios, Now: fixedNow, OpenStore: opener(s), JSON: true,
		Logger: func() (zerolog.Logger, error) { return zerolog.New(&logs), nil }}
	if err := scanRun(context.Background(), opts); err != nil || !strings.Contains(out.String(), "etl:orders") ||
		!strings.Contains(logs.String(), "could not look for overdue jobs") {
		t.Errorf("scan: %v, printed %q, logged %q; want the crashes and a warning", err, out.String(), logs.String())
	}
	opts.FailOn = []string{"overdue"}
	if err := scanRun(context.Background(), opts); exitCode(err) != exitUnavailable {
		t.Errorf("scan --fail-on overdue: %v (exit %d), want %d", err, exitCode(err), exitUnavailable)
	}
	ios, out, errOut := testStreams(false)
	if err := lsRun(context.Background(), &LsOptions{IO: ios, Now: fixedNow, OpenStore: opener(s)}); err != nil ||
		!strings.Contains(out.String(), "nightly-report") || !strings.Contains(errOut.String(), "could not mark overdue jobs") {
		t.Errorf("ls: %v, printed %q and %q", err, out.String(), errOut.String())
	}
}

// overdueless is a store whose Overdue fails, as an older registry's does.
type overdueless struct{ *stubStore }

func (overdueless) Overdue(context.Context) ([]leasestore.Overdue, error) {
	return nil, &leasestore.UnavailableError{Op: "list overdue", Err: errors.New("404 not found")}
}
