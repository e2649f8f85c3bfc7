package cmd

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/leasestore"
)

func TestNewCmdQuarantine(t *testing.T) {
	t.Setenv("USER", "alice")
	host, _ := os.Hostname()
	for _, tc := range []struct {
		argv     []string
		wantCode int
		want     QuarantineOptions
	}{
		{argv: []string{"list"}},
		{argv: []string{"list", "--json"}, want: QuarantineOptions{JSON: true}},
		{argv: []string{"list", "extra"}, wantCode: exitUsage},
		{argv: []string{"show", "billing-sync"}, want: QuarantineOptions{Job: "billing-sync"}},
		{argv: []string{"show"}, wantCode: exitUsage},
		{argv: []string{"show", "a{b}"}, wantCode: exitUsage},
		{argv: []string{"release", "billing-sync"}, want: QuarantineOptions{Job: "billing-sync", Reason: defaultReleaseReason, By: "alice@" + host}},
		{argv: []string{"release", "billing-sync", "--reason", "fixed (INC-1)"}, want: QuarantineOptions{Job: "billing-sync", Reason: "fixed (INC-1)", By: "alice@" + host}},
		{argv: []string{"release", "bad job"}, wantCode: exitUsage},
		{argv: []string{"release"}, wantCode: exitUsage},
		{argv: []string{"add", "legacy-export", "--reason", "upstream broken"}, want: QuarantineOptions{Job: "legacy-export", Reason: "upstream broken", By: "alice@" + host}},
		{argv: []string{"add", "legacy-export"}, wantCode: exitUsage},
		{argv: []string{"add", "legacy-export", "--reason", ""}, wantCode: exitUsage},
		{argv: []string{"add", "", "--reason", "x"}, wantCode: exitUsage},
		{argv: []string{"relase", "billing-sync"}, wantCode: exitUsage},
	} {
		var got *QuarantineOptions
		capture := func(o *QuarantineOptions) error { got = o; return nil }
		f := testFactory()
		group := NewCmdQuarantine(f)
		// Swap each subcommand for one that stops after flag parsing.
		for _, sub := range group.Commands() {
			group.RemoveCommand(sub)
		}
		group.AddCommand(NewCmdQuarantineList(f, capture), NewCmdQuarantineShow(f, capture),
			NewCmdQuarantineRelease(f, capture), NewCmdQuarantineAdd(f, capture))
		code := executeArgs(group, tc.argv...)
		if code != tc.wantCode {
			t.Errorf("quarantine %q: exit %d, want %d", tc.argv, code, tc.wantCode)
			continue
		}
		if code == 0 && (got.Job != tc.want.Job || got.Reason != tc.want.Reason || got.By != tc.want.By || got.JSON != tc.want.JSON) {
			t.Errorf("quarantine %q: options %+v, want %+v", tc.argv, got, tc.want)
		}
	}
}

func TestOperatorWithoutUser(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("USER", "")
	t.Setenv("LOGNAME", "cron-user")
	if got, want := operator(), "cron-user@"+host; got != want {
		t.Errorf("operator() = %q with $LOGNAME only, want %q", got, want)
	}
	t.Setenv("LOGNAME", "")
	id, err := exec.Command("id", "-un").Output() // the uid's name, as the system knows it
	if err != nil {
		t.Fatal(err)
	}
	if got, want := operator(), strings.TrimSpace(string(id))+"@"+host; got != want {
		t.Errorf("operator() = %q without $USER and $LOGNAME, want %q (the uid's name)", got, want)
	}
}

func quarantineOpts(ios *IOStreams, s leasestore.Driver, job string, asJSON bool) *QuarantineOptions {
	return &QuarantineOptions{IO: ios, Now: fixedNow, OpenStore: opener(s), Job: job, Reason: "fixed the input file (INC-1234)", By: "alice@ops-1", JSON: asJSON}
}

func TestQuarantineOutput(t *testing.T) {
	for _, m := range outputModes {
		for _, tc := range []struct {
			name  string
			run   func(context.Context, *QuarantineOptions) error
			store *stubStore
			job   string
		}{
			{"quarantine_list", quarantineListRun, sampleStore(), ""},
			{"quarantine_list_empty", quarantineListRun, &stubStore{}, ""},
			{"quarantine_show", quarantineShowRun, sampleStore(), "billing-sync"},
			{"quarantine_release", quarantineReleaseRun, sampleStore(), "billing-sync"},
			{"quarantine_add", quarantineAddRun, sampleStore(), "legacy-export"},
		} {
			ios, out, errOut := testStreams(m.tty)
			if err := tc.run(context.Background(), quarantineOpts(ios, tc.store, tc.job, m.json)); err != nil {
				t.Fatalf("%s (%s): %v", tc.name, m.name, err)
			}
			assertGolden(t, tc.name+"_"+m.name, out.String(), errOut.String())
		}
	}
}

func TestQuarantineReleaseAndAddRecordWhoAndWhy(t *testing.T) {
	ios, _, _ := testStreams(false)
	s := sampleStore()
	for _, run := range []func(context.Context, *QuarantineOptions) error{quarantineReleaseRun, quarantineAddRun} {
		if err := run(context.Background(), quarantineOpts(ios, s, "billing-sync", false)); err != nil {
			t.Fatal(err)
		}
		want := leasestore.Note{By: "alice@ops-1", Reason: "fixed the input file (INC-1234)"}
		if got := s.notes["billing-sync"]; got != want {
			t.Fatalf("the store got note %+v, want %+v", got, want)
		}
		delete(s.notes, "billing-sync")
	}
}

func TestQuarantineNotQuarantinedExits1(t *testing.T) {
	for name, run := range map[string]func(context.Context, *QuarantineOptions) error{
		"release": quarantineReleaseRun,
		"show":    quarantineShowRun,
	} {
		ios, out, _ := testStreams(true)
		var msg bytes.Buffer
		code := reportError(&msg, run(context.Background(), quarantineOpts(ios, sampleStore(), "nightly-report", false)))
		if code != exitFailure {
			t.Errorf("%s of a job not quarantined: exit %d, want %d", name, code, exitFailure)
		}
		if !strings.HasPrefix(msg.String(), `leasectl: job "nightly-report" is not quarantined`) || strings.Count(msg.String(), "\n") != 1 || out.Len() != 0 {
			t.Errorf("%s: stderr %q, stdout %q; want one line saying the job is not quarantined", name, msg.String(), out.String())
		}
	}
}
