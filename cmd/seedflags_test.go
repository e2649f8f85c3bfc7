package cmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunRegionAndDeadline drives the built binary on the embedded store
// as a cron entry would: seed 002's region and ttl_deadline from run's
// flags, each refusal with its exit code and one line naming the cause,
// and no child started on a refusal.
func TestRunRegionAndDeadline(t *testing.T) {
	env := userEnv(t)
	marker := filepath.Join(t.TempDir(), "ran")
	child := []string{"--", "sh", "-c", "touch " + marker}
	run := func(args ...string) binaryResult {
		t.Helper()
		return leasectlBinary(t, env, append(append([]string{"run"}, args...), child...)...)
	}
	notStarted := func(what string) {
		t.Helper()
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("%s: the child ran", what)
		}
	}

	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	res := run("--job", "report", "--ttl-deadline", past)
	if res.code != exitDeadline || !strings.Contains(res.stderr, "ttl_deadline "+past) {
		t.Errorf("a deadline an hour ago: exit %d, stderr %q; want %d naming the deadline", res.code, res.stderr, exitDeadline)
	}
	notStarted("a deadline an hour ago")
	res = run("--job", "report", "--ttl-deadline", time.Now().Add(time.Hour).Format(time.RFC3339))
	if res.code != 0 {
		t.Fatalf("a deadline an hour ahead: exit %d, stderr %q", res.code, res.stderr)
	}
	os.Remove(marker)

	if res := run("--job", "encode", "--region", "us-east-1"); res.code != 0 {
		t.Fatalf("the first grant in us-east-1: exit %d, stderr %q", res.code, res.stderr)
	}
	os.Remove(marker)
	res = run("--job", "encode", "--region", "eu-west-1")
	if res.code != exitRegion || !strings.Contains(res.stderr, "us-east-1") {
		t.Errorf("a worker of eu-west-1: exit %d, stderr %q; want %d naming us-east-1", res.code, res.stderr, exitRegion)
	}
	notStarted("a worker of another region")

	for _, bad := range [][]string{{"--region", "us east"}, {"--ttl-deadline", "tomorrow"}} {
		res := run(append([]string{"--job", "encode"}, bad...)...)
		if res.code != exitUsage || !strings.Contains(res.stderr, bad[0]) || strings.Count(strings.TrimSpace(res.stderr), "\n") > 0 {
			t.Errorf("%q: exit %d, stderr %q; want %d and one line naming the flag", bad, res.code, res.stderr, exitUsage)
		}
		notStarted(strings.Join(bad, " "))
	}
}
