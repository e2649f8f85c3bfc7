package cmd

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/supervise"
)

// TestRunTimingFlags is the timing rules of docs/design.md §4 as run's
// flags apply them: the defaults that follow --ttl follow it (--ttl 1h
// alone is a valid run), and a rule broken by a flag the user gave and a
// default they did not names the flag to add.
func TestRunTimingFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want supervise.Config // the timing in effect, when accepted
		says []string         // what the refusal says, when refused (exit 64)
	}{
		{name: "every default", args: nil,
			want: supervise.Config{TTL: 30 * time.Second, Heartbeat: 10 * time.Second, Safety: 15 * time.Second, Grace: 10 * time.Second, EvidenceTTL: time.Hour}},
		{name: "--ttl 1h alone", args: []string{"--ttl", "1h"},
			want: supervise.Config{TTL: time.Hour, Heartbeat: 20 * time.Minute, Safety: 30 * time.Minute, Grace: 10 * time.Second, EvidenceTTL: 2 * time.Hour}},
		{name: "--ttl 30m alone keeps the hour of evidence", args: []string{"--ttl", "30m"},
			want: supervise.Config{TTL: 30 * time.Minute, Heartbeat: 10 * time.Minute, Safety: 15 * time.Minute, Grace: 10 * time.Second, EvidenceTTL: time.Hour}},
		{name: "--ttl 3s alone", args: []string{"--ttl", "3s"},
			want: supervise.Config{TTL: 3 * time.Second, Heartbeat: time.Second, Safety: 1500 * time.Millisecond, Grace: 3 * time.Second, EvidenceTTL: time.Hour}},
		{name: "--safety below the default heartbeat", args: []string{"--safety", "2s"},
			says: []string{"--safety 2s must be longer than --heartbeat 10s", "; --heartbeat was not given (default --ttl/3): add --heartbeat"}},
		{name: "--safety beyond the default ttl", args: []string{"--safety", "40s"},
			says: []string{"--safety 40s must be shorter than --ttl 30s", "; --ttl was not given (default 30s): add --ttl"}},
		{name: "--heartbeat beyond the default ttl/3", args: []string{"--heartbeat", "15s"},
			says: []string{"--heartbeat 15s must be at most --ttl/3 (10s)", "add --ttl"}},
		{name: "--grace beyond the default ttl", args: []string{"--grace", "1m"},
			says: []string{"--grace 1m0s must be at most --ttl 30s", "add --ttl"}},
		{name: "--evidence-ttl shorter than the default ttl + 1m", args: []string{"--evidence-ttl", "80s"},
			says: []string{"--evidence-ttl 1m20s must be longer than --ttl + 1m", "add --ttl"}},
		{name: "--ttl with a default heartbeat it outgrew", args: []string{"--ttl", "2s", "--safety", "500ms"},
			says: []string{"--safety 500ms must be longer than --heartbeat 666.666666ms", "add --heartbeat"}},
		{name: "both flags given: the rule alone", args: []string{"--ttl", "10s", "--grace", "20s"},
			says: []string{"--grace 20s must be at most --ttl 10s"}},
		{name: "--max-crashes 1", args: []string{"--max-crashes", "1"},
			says: []string{"--max-crashes 1 must be at least 2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *RunOptions
			c := NewCmdRun(testFactory(), func(o *RunOptions) error { got = o; return nil })
			c.SetArgs(append(append([]string{"--job", "j"}, tt.args...), "--", "true"))
			c.SetOut(io.Discard)
			c.SetErr(io.Discard)
			err := c.Execute()
			if tt.says != nil {
				msg := errorMessage(err)
				if exitCode(err) != exitUsage {
					t.Fatalf("exit %d (%v), want %d", exitCode(err), err, exitUsage)
				}
				for _, s := range tt.says {
					if !strings.Contains(msg, s) {
						t.Errorf("refusal %q does not say %q", msg, s)
					}
				}
				if !strings.Contains(strings.Join(tt.says, " "), "add ") && strings.Contains(msg, "add --") {
					t.Errorf("refusal %q names a flag to add, but the user gave every flag of the rule", msg)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			c2 := got.Config
			if c2.TTL != tt.want.TTL || c2.Heartbeat != tt.want.Heartbeat || c2.Safety != tt.want.Safety || c2.Grace != tt.want.Grace || c2.EvidenceTTL != tt.want.EvidenceTTL {
				t.Errorf("ttl %s heartbeat %s safety %s grace %s evidence-ttl %s; want %s %s %s %s %s",
					c2.TTL, c2.Heartbeat, c2.Safety, c2.Grace, c2.EvidenceTTL,
					tt.want.TTL, tt.want.Heartbeat, tt.want.Safety, tt.want.Grace, tt.want.EvidenceTTL)
			}
		})
	}
}
