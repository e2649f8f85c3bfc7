package cmd

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasectl/leasectl/internal/testenv"
	"github.com/leasectl/leasectl/leasestore/httpstore"
)

// between returns file's text after start, up to end (or the end of the
// file), failing t when file lacks start.
func between(t *testing.T, file, start, end string) string {
	t.Helper()
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(text), start)
	if !ok {
		t.Fatalf("%s has no %q", file, strings.TrimSpace(start))
	}
	rest, _, _ = strings.Cut(rest, end)
	return rest
}

// readmeOnCall returns the rows of the README's on-call table: the command
// as written (its first backquoted words) and the exit statuses the row
// documents.
func readmeOnCall(t *testing.T) map[string][]int {
	t.Helper()
	section := between(t, "../README.md", "\n## On-call\n", "\n## ")
	row := regexp.MustCompile("(?m)^\\| `(leasectl [^`]*)` \\|.*\\| ([^|]*) \\|$")
	code := regexp.MustCompile(`\b\d{1,3}\b`)
	rows := map[string][]int{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		for _, c := range code.FindAllString(m[2], -1) {
			n, _ := strconv.Atoi(c)
			rows[m[1]] = append(rows[m[1]], n)
		}
	}
	if len(rows) == 0 {
		t.Fatal("the README's on-call table has no rows with exit statuses")
	}
	return rows
}

// commandOf is the command a README row names: its words up to the first
// that is not a command name ("leasectl quarantine show JOB" names
// quarantine show).
func commandOf(t *testing.T, root *cobra.Command, row string) *cobra.Command {
	t.Helper()
	var path []string
	for _, w := range strings.Fields(row)[1:] {
		if !regexp.MustCompile(`^[a-z]+$`).MatchString(w) {
			break
		}
		path = append(path, w)
	}
	c, _, err := root.Find(path)
	if err != nil || c == root {
		t.Fatalf("README row %q names no command (%v)", row, err)
	}
	return c
}

// TestOnCallDocsMatchBehaviour holds the README's on-call table, each
// command's --help and the commands themselves to the same exit statuses:
// every status a row documents is one the command gives in a scenario
// below, the command gives no other (64 aside, for usage errors, which
// every command gives and the README says once), and its help's "Exit
// status:" paragraph names the same. Every on-call command takes --json.
func TestOnCallDocsMatchBehaviour(t *testing.T) {
	rows := readmeOnCall(t)
	// What each row's command gives, scenario by scenario, in this process
	// over canned stores: the sample scene, or a store that cannot be
	// reached.
	type scenario struct {
		args  []string
		store *stubStore
	}
	down := func() *stubStore { return &stubStore{err: unavailable} }
	forbidden := func() *stubStore {
		return &stubStore{err: &httpstore.AuthError{Registry: "https://registry", Status: http.StatusForbidden, Role: "worker", Required: "operator"}}
	}
	scenarios := map[string][]scenario{
		"leasectl ls": {{[]string{"ls"}, sampleStore()}, {[]string{"ls"}, &stubStore{}}, {[]string{"ls"}, down()}},
		"leasectl status JOB": {{[]string{"status", "nightly-report"}, sampleStore()}, {[]string{"status", "never-seen"}, sampleStore()},
			{[]string{"status", "j"}, down()}},
		"leasectl scan [--overdue] [--fail-on crashed,overdue,quarantined]": {{[]string{"scan"}, sampleStore()}, {[]string{"scan"}, &stubStore{}},
			{[]string{"scan"}, down()}, {[]string{"scan", "--fail-on", "crashed"}, sampleStore()}},
		"leasectl expect JOB --every D [--grace D]": {{[]string{"expect", "nightly", "--every", "1h"}, sampleStore()},
			{[]string{"expect", "j", "--every", "1h"}, down()}, {[]string{"expect", "j", "--clear"}, forbidden()}},
		"leasectl quarantine list": {{[]string{"quarantine", "list"}, sampleStore()}, {[]string{"quarantine", "list"}, down()}},
		"leasectl quarantine show JOB": {{[]string{"quarantine", "show", "billing-sync"}, sampleStore()},
			{[]string{"quarantine", "show", "nightly-report"}, sampleStore()}, {[]string{"quarantine", "show", "j"}, down()}},
		"leasectl quarantine release JOB [--reason TEXT]": {{[]string{"quarantine", "release", "billing-sync"}, sampleStore()},
			{[]string{"quarantine", "release", "nightly-report"}, sampleStore()}, {[]string{"quarantine", "release", "j"}, down()},
			{[]string{"quarantine", "release", "j"}, forbidden()}},
		"leasectl quarantine add JOB --reason TEXT": {{[]string{"quarantine", "add", "j", "--reason", "r"}, sampleStore()},
			{[]string{"quarantine", "add", "j", "--reason", "r"}, down()}, {[]string{"quarantine", "add", "j", "--reason", "r"}, forbidden()}},
		"leasectl stop JOB --reason TEXT": {{[]string{"stop", "nightly-report", "--reason", "r"}, sampleStore()},
			{[]string{"stop", "billing-sync", "--reason", "r"}, sampleStore()}, {[]string{"stop", "j", "--reason", "r"}, down()},
			{[]string{"stop", "j", "--reason", "r"}, forbidden()}},
		"leasectl token check --job ID --token N": {{[]string{"token", "check", "--job", "nightly-report", "--token", "1772331247000001"}, sampleStore()},
			{[]string{"token", "check", "--job", "nightly-report", "--token", "1"}, sampleStore()},
			{[]string{"token", "check", "--job", "j", "--token", "1"}, down()}},
	}
	helps := map[*cobra.Command][]int{} // what the rows of each command document, 64 included
	root := NewCmdRoot(testFactory())
	for row, documented := range rows {
		c := commandOf(t, root, row)
		helps[c] = append(append(helps[c], documented...), exitUsage)
		if c.Flags().Lookup("json") == nil {
			t.Errorf("%s takes no --json, which the README promises every on-call command takes", c.CommandPath())
		}
		if strings.Contains(row, "--watch") {
			continue // TestScanWatchExitStatuses, with the binary and real signals
		}
		cases, ok := scenarios[row]
		if !ok {
			t.Errorf("README row %q: no scenarios to hold it to", row)
			continue
		}
		seen := map[int]bool{}
		for _, sc := range cases {
			code := runInProcess(sc.store, sc.args...)
			seen[code] = true
			if !slices.Contains(documented, code) {
				t.Errorf("%q exits %d, which the README's row %q does not document (%v)", sc.args, code, row, documented)
			}
		}
		for _, code := range documented {
			if !seen[code] {
				t.Errorf("README row %q documents exit %d, which no scenario gives", row, code)
			}
		}
	}
	code := regexp.MustCompile(`\b\d{1,3}\b`)
	for c, documented := range helps {
		_, para, ok := strings.Cut(c.Long, "Exit status:")
		if !ok {
			t.Errorf("%s --help has no \"Exit status:\" paragraph", c.CommandPath())
			continue
		}
		var inHelp []int
		for _, s := range code.FindAllString(para, -1) {
			n, _ := strconv.Atoi(s)
			inHelp = append(inHelp, n)
		}
		slices.Sort(inHelp)
		slices.Sort(documented)
		if !slices.Equal(slices.Compact(inHelp), slices.Compact(documented)) {
			t.Errorf("%s --help says exit statuses %v, the README %v", c.CommandPath(), slices.Compact(inHelp), slices.Compact(documented))
		}
	}
}

// runInProcess runs the command tree on args over store s and returns the
// exit code.
func runInProcess(s *stubStore, args ...string) int {
	f := testFactory()
	f.OpenStore = opener(s)
	root := NewCmdRoot(f)
	root.SetArgs(args)
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	return exitCode(root.ExecuteContext(context.Background()))
}

// TestScanWatchExitStatuses: the reaper exits 0 on SIGTERM, even with its
// store unreachable all along, and 1 when it cannot serve its metrics.
func TestScanWatchExitStatuses(t *testing.T) {
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	for _, store := range []string{"file://" + filepath.Join(t.TempDir(), "store"), "redis://127.0.0.1:1/0"} {
		cmd := exec.Command(bin, "-v", "scan", "--watch", "--interval", "100ms")
		cmd.Env = append(userEnv(t), "LEASECTL_STORE="+store, "LEASECTL_LOG_FORMAT=json")
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		watching := make(chan bool, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				if strings.Contains(sc.Text(), "watching for crashed jobs") {
					watching <- true
				}
			}
			close(watching)
		}()
		select {
		case <-watching:
		case <-time.After(binaryHangGuard):
			_ = cmd.Process.Kill()
			t.Fatalf("%s: the reaper never said it watches", store)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("%s: scan --watch after SIGTERM: %v, want exit 0", store, err)
		}
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	res := leasectlBinary(t, append(userEnv(t), "LEASECTL_STORE=file://"+filepath.Join(t.TempDir(), "store")),
		"scan", "--watch", "--metrics-addr", busy.Addr().String())
	if res.code != exitFailure {
		t.Errorf("scan --watch on a busy metrics address: exit %d, want 1; stderr %q", res.code, res.stderr)
	}
}

func TestCompactDuration(t *testing.T) {
	for in, want := range map[string]string{"1h0m0s": "1h", "5m0s": "5m", "1h30m0s": "1h30m", "10s": "10s", "1m30s": "1m30s", "0s": "0s", "250ms": "250ms"} {
		if got := compactDuration(in); got != want {
			t.Errorf("compactDuration(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestHelpShowsDefaultsAsTheyApply: --help shows the store taken from the
// environment without its password, and durations as the docs write them.
func TestHelpShowsDefaultsAsTheyApply(t *testing.T) {
	t.Setenv("LEASECTL_STORE", "redis://:help-s3cret@redis.internal:6379/0")
	for args, want := range map[string]string{
		"--help":            `(default "redis://:xxxxx@redis.internal:6379/0")`,
		"run --help":        "how long a crashed run's evidence is kept (default max(1h, 2×--ttl))",
		"run --help ":       "renewal period (default --ttl/3)",
		" run --help":       "SIGKILL the child this much later (default min(10s, --ttl))",
		"scan --help":       "time between scans with --watch (default 10s)",
		"quarantine --help": `(default "redis://:xxxxx@redis.internal:6379/0")`,
	} {
		stdout, stderr, code := releaseRun(t, strings.Fields(args)...)
		if code != 0 || !strings.Contains(stdout, want) || strings.Contains(stdout+stderr, "help-s3cret") {
			t.Errorf("leasectl %s: exit %d; want %q and no password in:\n%s", args, code, want, stdout)
		}
	}
}

// TestHelpNamesOnlyLeasectlsExitStatuses: an exit status a command's help
// names outside its "Exit status:" paragraph (another command's: "makes
// it exit 81") is one of leasectl's (exit.go).
func TestHelpNamesOnlyLeasectlsExitStatuses(t *testing.T) {
	known := map[int]bool{}
	for _, c := range []int{exitOK, exitFailure, exitUsage, exitUnavailable, exitHeld, exitQuarantined, exitDeadline,
		exitRegion, exitForbidden, exitMaxRuntime, exitStopped, exitFound, exitLeaseLost} {
		known[c] = true
	}
	mention := regexp.MustCompile(`\bexits? (\d{1,3})\b`)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		text, _, _ := strings.Cut(c.Long, "Exit status:")
		for _, m := range mention.FindAllStringSubmatch(text, -1) {
			if n, _ := strconv.Atoi(m[1]); !known[n] {
				t.Errorf("%s --help says %q, which is not one of leasectl's exit statuses", c.CommandPath(), m[0])
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewCmdRoot(testFactory()))
}
