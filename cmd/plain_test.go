package cmd

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestUsageErrorsInPlainWords drives the binary with what users get wrong:
// each is exit 64 with one line that says what is wrong and how the
// command is used, never cobra's, strconv's or time's raw words, and a job
// ID is shown as typed.
func TestUsageErrorsInPlainWords(t *testing.T) {
	env := append(userEnv(t), "LEASECTL_LOG_FORMAT=console", "LEASECTL_STORE=file://"+filepath.Join(t.TempDir(), "store"))
	raw := []string{"accepts ", "arg(s)", "received", "strconv.", "Parse", "time: ", "unknown unit", "missing unit", "required flag(s)", "Ã"}
	for _, tc := range []struct {
		args []string
		says []string
	}{
		{[]string{"status"}, []string{"needs a job ID", "leasectl status JOB"}},
		{[]string{"status", "a", "b"}, []string{"takes one job ID, got 2"}},
		{[]string{"quarantine", "show"}, []string{"needs a job ID", "leasectl quarantine show JOB"}},
		{[]string{"quarantine", "release", "a", "b"}, []string{"takes one job ID"}},
		{[]string{"ls", "nightly"}, []string{`ls takes no arguments, got "nightly"`}},
		{[]string{"scan", "now"}, []string{"takes no arguments"}},
		{[]string{"token", "check", "--job", "a"}, []string{"needs --token"}},
		{[]string{"token", "check", "--job", "a", "--token", "abc"}, []string{`invalid --token "abc": want a whole number`}},
		{[]string{"run", "--job", "a", "--max-crashes", "x", "--", "true"}, []string{`invalid --max-crashes "x": want a whole number`}},
		{[]string{"run", "--job", "a", "--ttl", "5e", "--", "true"}, []string{`invalid --ttl "5e": want a duration such as 250ms, 30s`}},
		{[]string{"run", "--job", "a", "--ttl", "30", "--", "true"}, []string{`invalid --ttl "30": a duration needs a unit, as in 30ms, 30s or 30m`}},
		{[]string{"run", "--job", "a", "--ttl", "1ms", "--", "true"}, []string{"--ttl 1ms is shorter than 100ms"}},
		{[]string{"run", "--", "true"}, []string{"run needs --job"}},
		{[]string{"run", "--job"}, []string{"--job needs a value"}},
		{[]string{"run", "--job", "a", "--foo", "--", "true"}, []string{"unknown flag: --foo", "put -- before the command"}},
		{[]string{"run", "--job", "a", "ls", "-la"}, []string{"put -- before the command"}},
		{[]string{"run", "--job", "café", "--", "true"}, []string{`invalid job ID "café": character 'é' at byte 3`}},
		{[]string{"--namespace", "équipe", "ls"}, []string{`character 'é' at byte 0`}},
	} {
		res := leasectlBinary(t, env, tc.args...)
		if res.code != exitUsage {
			t.Errorf("%q: exit %d, want 64; stderr %q", tc.args, res.code, res.stderr)
		}
		if len(lines(res.stderr)) != 1 {
			t.Errorf("%q: %d lines on stderr, want one: %q", tc.args, len(lines(res.stderr)), res.stderr)
		}
		for _, s := range tc.says {
			if !strings.Contains(res.stderr, s) {
				t.Errorf("%q: stderr %q does not say %q", tc.args, res.stderr, s)
			}
		}
		for _, r := range raw {
			if strings.Contains(res.stderr, r) {
				t.Errorf("%q: stderr %q has the raw %q", tc.args, res.stderr, r)
			}
		}
	}
}
