package cmd

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/leasestore"
)

// The --notify-* flags: on the reaper only, validated before any I/O, a
// bad one a one-line usage error (exit 64) that never shows a webhook's
// path or query, where its secret lives.
func TestNotifyFlags(t *testing.T) {
	slack := "https://hooks.slack.com/services/T000/B000/s3cr3t"
	for _, tc := range []struct {
		cmd  string
		argv []string
		code int
	}{
		{"scan", []string{"--watch", "--notify-webhook", slack, "--notify-webhook", "http://127.0.0.1:9/hook", "--notify-format", "slack"}, 0},
		{"scan", []string{"--watch", "--notify-command", "logger -t leasectl"}, 0},
		{"scan", []string{"--notify-webhook", slack}, exitUsage},
		{"scan", []string{"--notify-command", "true"}, exitUsage},
		{"scan", []string{"--watch", "--notify-webhook", "ftp://user:s3cr3t@example.com/s3cr3t"}, exitUsage},
		{"scan", []string{"--watch", "--notify-webhook", "hooks.slack.com/services/s3cr3t"}, exitUsage},
		{"scan", []string{"--watch", "--notify-webhook", slack, "--notify-format", "xml"}, exitUsage},
		{"scan", []string{"--watch", "--notify-command", " "}, exitUsage},
		{"scan", []string{"--watch", "--notify-webhook", slack, "--notify-timeout", "0s"}, exitUsage},
		{"serve", []string{"--listen", "127.0.0.1:0", "--tokens", "t", "--reap-interval", "10s", "--notify-webhook", slack}, 0},
		{"serve", []string{"--listen", "127.0.0.1:0", "--tokens", "t", "--notify-webhook", slack}, exitUsage},
	} {
		c := NewCmdScan(testFactory(), func(*ScanOptions) error { return nil })
		if tc.cmd == "serve" {
			c = NewCmdServe(testFactory(), func(*ServeOptions) error { return nil })
		}
		c.SetArgs(tc.argv)
		var out bytes.Buffer
		c.SetOut(&out)
		c.SetErr(&out)
		err := c.Execute()
		if code := exitCode(err); code != tc.code {
			t.Errorf("%s %q: exit %d (%v), want %d", tc.cmd, tc.argv, code, err, tc.code)
		}
		if err != nil && (strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "\n")) {
			t.Errorf("%s %q: error %q; want one line without the webhook's secret", tc.cmd, tc.argv, err)
		}
	}
}

// quarantine add and release record the operator's decision as a notice,
// after the store took it.
func TestQuarantineRecordsNotices(t *testing.T) {
	ios, _, errOut := testStreams(false)
	s := sampleStore()
	if err := quarantineAddRun(context.Background(), quarantineOpts(ios, s, "legacy-export", false)); err != nil {
		t.Fatal(err)
	}
	if err := quarantineReleaseRun(context.Background(), quarantineOpts(ios, s, "billing-sync", false)); err != nil {
		t.Fatal(err)
	}
	if len(s.notices) != 2 {
		t.Fatalf("recorded %+v, want two notices", s.notices)
	}
	add, release := s.notices[0], s.notices[1]
	if add.Kind != leasestore.NoticeQuarantined || add.Job != "legacy-export" || add.By != "alice@ops-1" || !add.At.Equal(fixedNow()) ||
		release.Kind != leasestore.NoticeReleased || release.Job != "billing-sync" || !strings.Contains(release.Detail, "INC-1234") {
		t.Errorf("recorded %+v and %+v; want legacy-export quarantined and billing-sync released, by alice, with the reason", add, release)
	}
	if strings.Contains(errOut.String(), "warning") {
		t.Errorf("stderr %q, want no warning", errOut)
	}
}
