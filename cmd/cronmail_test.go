package cmd

import (
	"bufio"
	"bytes"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/testenv"
)

// cronJob is the job of every case of the README's cron mail.
const cronJob = "nightly-report"

// cronEnv is cron's environment for one case: stderr a pipe, no log format
// set, a store of the case's own.
func cronEnv(t *testing.T) []string {
	t.Helper()
	return append(userEnv(t), "LEASECTL_STORE=file://"+filepath.Join(t.TempDir(), "store"))
}

// readmeCronMail returns the README's cron mail, case by case: each
// comment line of the block between <!-- cron-mail --> markers, and the
// lines under it.
func readmeCronMail(t *testing.T) map[string][]string {
	t.Helper()
	block := between(t, "../README.md", "<!-- cron-mail -->\n```text\n", "```\n<!-- /cron-mail -->")
	cases := map[string][]string{}
	var name string
	for _, l := range strings.Split(block, "\n") {
		switch {
		case strings.HasPrefix(l, "# "):
			name = l
			cases[name] = nil
		case l != "":
			cases[name] = append(cases[name], l)
		}
	}
	return cases
}

// cronNormal replaces what differs from run to run in a mail line (tokens,
// workers, hosts, pids, times, durations) with placeholders.
func cronNormal(line string) string {
	for _, r := range []struct{ re, with string }{
		{`token=\d+`, "token=TOKEN"},
		{`worker[= ][^ ;,)]+`, "worker WORKER"},
		{`\(host [^ ,]+, pid \d+\)`, "(host HOST, pid PID)"},
		{` on [^ ;,)]+\)`, " on HOST)"},
		{`(pgid|pid)=\d+`, "$1=PID"},
		{`\d{4}-\d\d-\d\dT[0-9:.]+(Z|[+-]\d\d:\d\d)`, "TIME"},
		{`(duration|max_runtime)=[0-9.hmsµn]+`, "$1=DURATION"},
		{`expires in [0-9.hmsµn]+`, "expires in DURATION"},
	} {
		line = regexp.MustCompile(r.re).ReplaceAllString(line, r.with)
	}
	return line
}

// TestCronMailIsWhatTheReadmeShows runs each case of the README's cron
// section with the built binary as cron would (stderr a pipe, no log
// format set) and holds its stderr to what the README shows, tokens,
// workers, times and durations aside: console lines, durations with their
// unit, no empty field.
func TestCronMailIsWhatTheReadmeShows(t *testing.T) {
	readme := readmeCronMail(t)
	cases := []struct {
		name string // the start of the README's comment line
		code int
		run  func(t *testing.T) binaryResult
	}{
		{"# The child failed", 3, func(t *testing.T) binaryResult {
			return leasectlBinary(t, cronEnv(t), "run", "--job", cronJob, "--", "sh", "-c", "exit 3")
		}},
		{"# --max-runtime passed", exitMaxRuntime, func(t *testing.T) binaryResult {
			return leasectlBinary(t, cronEnv(t), "run", "--job", cronJob, "--max-runtime", "200ms", "--", "sleep", "60")
		}},
		{"# leasectl itself was killed", -1, killedSupervisor},
		{"# Held elsewhere", exitHeld, func(t *testing.T) binaryResult {
			env := cronEnv(t)
			holdJob(t, env, cronJob)
			return leasectlBinary(t, env, "run", "--job", cronJob, "--", "true")
		}},
		{"# Quarantined", exitQuarantined, func(t *testing.T) binaryResult {
			env := cronEnv(t)
			for range 3 {
				if res := leasectlBinary(t, env, "run", "--job", cronJob, "--", "sh", "-c", "kill -SEGV $$"); res.code != 139 {
					t.Fatalf("a crash: exit %d, stderr %q", res.code, res.stderr)
				}
			}
			return leasectlBinary(t, env, "run", "--job", cronJob, "--", "true")
		}},
	}
	for _, tc := range cases {
		t.Run(strings.TrimPrefix(tc.name, "# "), func(t *testing.T) {
			var want []string
			found := 0
			for name, lines := range readme {
				if strings.HasPrefix(name, tc.name) {
					want, found = lines, found+1
				}
			}
			if found != 1 {
				t.Fatalf("the README's cron mail has %d cases starting %q, want one", found, tc.name)
			}
			res := tc.run(t)
			if res.code != tc.code {
				t.Errorf("exit %d, want %d", res.code, tc.code)
			}
			got := lines(res.stderr)
			if len(got) != len(want) {
				t.Fatalf("cron mailed %d lines, the README shows %d:\n%s", len(got), len(want), res.stderr)
			}
			for i := range got {
				if g, w := cronNormal(got[i]), cronNormal(want[i]); g != w {
					t.Errorf("cron mailed\n  %s\nthe README shows\n  %s\n(normalised: %q and %q)", got[i], want[i], g, w)
				}
			}
		})
	}
	if len(readme) != len(cases) {
		t.Errorf("the README shows %d cases of cron mail, the test runs %d", len(readme), len(cases))
	}
}

// killedSupervisor runs the job, SIGKILLs leasectl once its watchdog is
// ready, and returns what stderr got until every process writing to it
// (the watchdog, the child) was gone.
func killedSupervisor(t *testing.T) binaryResult {
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	// The child says its group's leader, the watchdog.
	cmd := exec.Command(bin, "run", "--job", cronJob, "--", "sh", "-c", `echo "$(cut -d' ' -f5 /proc/$$/stat)"; exec sleep 1000`)
	cmd.Env = cronEnv(t)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Scan()
		n, _ := strconv.Atoi(sc.Text())
		pgid <- n
	}()
	var watchdog int
	select {
	case watchdog = <-pgid:
	case <-time.After(binaryHangGuard):
		t.Fatal("the child did not start")
	}
	// Until the watchdog is ready it has not read the run's token, which
	// its last word carries.
	awaitIgnored(t, watchdog, syscall.SIGUSR1)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }() // returns once stderr's last writer closed it
	select {
	case <-done:
	case <-time.After(binaryHangGuard):
		t.Fatalf("stderr stayed open; it got %q", errOut.String())
	}
	return binaryResult{stderr: errOut.String(), code: cmd.ProcessState.ExitCode()}
}

// TestARunThatEndsBeforeItsChildStartsWritesOneLine: under cron (stderr a
// pipe, no log format set), a missing command, a bad flag or a store that
// refuses the connection is one line beginning "leasectl:".
func TestARunThatEndsBeforeItsChildStartsWritesOneLine(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "redis://" + l.Addr().String() + "/0"
	l.Close()
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"run", "--job", cronJob, "--"}, exitUsage},
		{[]string{"run", "--job", cronJob, "--ttl", "30", "--", "true"}, exitUsage},
		{[]string{"run", "--job", cronJob, "--safety", "2s", "--", "true"}, exitUsage},
		{[]string{"--store", closed, "run", "--job", cronJob, "--", "true"}, exitUnavailable},
		{[]string{"--store", "redis://127.0.0.1:notaport", "run", "--job", cronJob, "--", "true"}, exitUsage},
	} {
		res := leasectlBinary(t, cronEnv(t), tc.args...)
		if res.code != tc.code || len(lines(res.stderr)) != 1 || !strings.HasPrefix(res.stderr, "leasectl: ") {
			t.Errorf("%q: exit %d, stderr %q; want %d and one line beginning \"leasectl: \"", tc.args, res.code, res.stderr, tc.code)
		}
	}
}
