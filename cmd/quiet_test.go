package cmd

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/testenv"
)

// lines splits stderr into its lines, without the empty last one.
func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// holdJob runs leasectl holding job until the test ends, and returns once
// its child started; runArgs are more flags of run.
func holdJob(t *testing.T, env []string, job string, runArgs ...string) *exec.Cmd {
	t.Helper()
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{"run", "--job", job}, runArgs...), "--", "sh", "-c", "echo started; read line; true")
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		started <- sc.Scan() && sc.Text() == "started"
		_, _ = io.Copy(io.Discard, out)
	}()
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	select {
	case ok := <-started:
		if !ok {
			t.Fatal("the holder's child did not start")
		}
	case <-time.After(binaryHangGuard):
		t.Fatal("the holder's child did not start")
	}
	return cmd
}

// TestRunIsQuietUnlessSomethingWentWrong is what cron mails: nothing for a
// run that succeeded, was skipped by --min-interval or was refused with
// --conflict-exit-code 0 (flock -n -E 0); one line saying why for a run
// that failed or was refused with a non-zero code; the lifecycle with -v
// or --log-level info. In both log formats.
func TestRunIsQuietUnlessSomethingWentWrong(t *testing.T) {
	for _, format := range []string{"json", "console"} {
		t.Run(format, func(t *testing.T) {
			env := append(userEnv(t), "LEASECTL_LOG_FORMAT="+format, "LEASECTL_STORE=file://"+filepath.Join(t.TempDir(), "store"))
			run := func(want int, args ...string) []string {
				t.Helper()
				res := leasectlBinary(t, env, args...)
				if res.code != want {
					t.Fatalf("%q: exit %d, want %d; stderr %q", args, res.code, want, res.stderr)
				}
				return lines(res.stderr)
			}
			quiet := func(what string, got []string) {
				t.Helper()
				if len(got) != 0 {
					t.Errorf("%s: stderr %q, want nothing", what, got)
				}
			}
			oneLine := func(what string, got []string, says string) {
				t.Helper()
				if len(got) != 1 || !strings.Contains(got[0], says) {
					t.Errorf("%s: stderr %q, want one line saying %q", what, got, says)
				}
			}
			quiet("success", run(0, "run", "--job", "nightly", "--", "true"))
			quiet("--min-interval skip", run(0, "run", "--job", "nightly", "--min-interval", "1h", "--", "true"))
			oneLine("failure", run(3, "run", "--job", "nightly", "--", "sh", "-c", "exit 3"), "failed exit 3")
			oneLine("crash", run(139, "run", "--job", "segv", "--", "sh", "-c", "kill -SEGV $$"), "crashed")

			holdJob(t, env, "held")
			quiet("held, --conflict-exit-code 0", run(0, "run", "--job", "held", "--conflict-exit-code", "0", "--", "true"))
			oneLine("held", run(75, "run", "--job", "held", "--", "true"), "is held by worker")
			oneLine("held after --wait-timeout", run(75, "run", "--job", "held", "--wait-timeout", "200ms", "--", "true"), "gave up after waiting")

			run(0, "quarantine", "add", "poison", "--reason", "testing")
			oneLine("quarantined", run(76, "run", "--job", "poison", "--", "true"), "quarantined")

			for _, verbose := range [][]string{{"-v"}, {"--log-level", "info"}} {
				got := run(0, append(verbose, "run", "--job", "nightly", "--", "true")...)
				if len(got) != 2 || !strings.Contains(got[0], "lease acquired; child started") || !strings.Contains(got[1], "child ended") {
					t.Errorf("%v: stderr %q, want the grant and the end", verbose, got)
				}
			}
			got := run(0, "-v", "run", "--job", "held", "--conflict-exit-code", "0", "--", "true")
			if len(got) != 1 || !strings.Contains(got[0], "skipped") {
				t.Errorf("-v held, --conflict-exit-code 0: stderr %q, want the skip", got)
			}
		})
	}
}

// TestACommandThatCannotRunSaysSoAsAShellWould: one "leasectl:" line in
// the shell's words and the shell's code, or one JSON record with them.
func TestACommandThatCannotRunSaysSoAsAShellWould(t *testing.T) {
	dir := t.TempDir()
	script := func(name, text string, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		writeFile(t, path, text, mode)
		return path
	}
	notExec := script("not-exec.sh", "#!/bin/sh\necho hi\n", 0o644)
	badInterp := script("bad-interp.sh", "#!/no/such/interpreter\necho hi\n", 0o755)
	tests := []struct {
		command string
		code    int
		says    string
	}{
		{"no-such-command-leasectl", 127, "no-such-command-leasectl: command not found"},
		{filepath.Join(dir, "missing"), 127, filepath.Join(dir, "missing") + ": no such file or directory"},
		{dir, 126, dir + ": is a directory"},
		{notExec, 126, notExec + ": permission denied"},
		{badInterp, 126, badInterp + ": bad interpreter"},
	}
	for _, tt := range tests {
		env := append(userEnv(t), "LEASECTL_STORE=file://"+filepath.Join(t.TempDir(), "store"))
		res := leasectlBinary(t, append(env, "LEASECTL_LOG_FORMAT=console"), "run", "--job", "j", "--", tt.command)
		if res.code != tt.code || !strings.HasPrefix(res.stderr, "leasectl: "+tt.says) || len(lines(res.stderr)) != 1 {
			t.Errorf("%s: exit %d, stderr %q; want %d and one line \"leasectl: %s\"", tt.command, res.code, res.stderr, tt.code, tt.says)
		}
		res = leasectlBinary(t, append(env, "LEASECTL_LOG_FORMAT=json"), "run", "--job", "j", "--", tt.command)
		var rec struct {
			Level, Message, Job string
			ExitCode            int `json:"exit_code"`
		}
		if err := json.Unmarshal([]byte(res.stderr), &rec); err != nil || len(lines(res.stderr)) != 1 ||
			rec.Level != "error" || rec.ExitCode != tt.code || rec.Job != "j" || !strings.HasPrefix(rec.Message, tt.says) {
			t.Errorf("%s, JSON: exit %d, stderr %q (%v); want one error record with exit_code %d saying %q", tt.command, res.code, res.stderr, err, tt.code, tt.says)
		}
	}
}
