package supervise_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/leasectl/leasectl/internal/faultproxy"
	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/internal/testenv"
	"github.com/leasectl/leasectl/internal/testserver"
)

// These tests drive the built binary against a real redis-server that
// TestMain starts on a free loopback port.

// redisSrv is the package's shared redis-server.
var redisSrv = testserver.Share("test redis-server", redistest.Start, redistest.Options{})

func TestMain(m *testing.M) {
	crashIfAsked()
	code := testserver.Run(m, redisSrv)
	testenv.Cleanup()
	os.Exit(code)
}

// hangGuard only catches hangs; timing assertions use their own bounds.
const hangGuard = 20 * time.Second

// leasectl returns a command running the binary against srv (nil: the
// embedded store in a folder of the test's own) in a namespace of the
// test's own, so that repeated runs (-count) never share state.
func leasectl(t *testing.T, srv *redistest.Server, args ...string) *exec.Cmd {
	t.Helper()
	w := worldOf(t)
	cmd := testenv.Command(t, args...)
	env := append(os.Environ(),
		"LEASECTL_NAMESPACE="+w.namespace,
		"LEASECTL_LOG_FORMAT=json",
		"XDG_STATE_HOME="+w.stateDir,
	)
	if srv != nil {
		env = append(env, "LEASECTL_STORE="+srv.URL)
	} else {
		env = append(env, "LEASECTL_STORE=")
	}
	cmd.Env = env
	return cmd
}

// world is one test's namespace and embedded store folder.
type world struct {
	namespace string
	stateDir  string
}

var (
	worldsMu sync.Mutex
	worlds   = map[*testing.T]world{}
	worldSeq int
)

func worldOf(t *testing.T) world {
	worldsMu.Lock()
	defer worldsMu.Unlock()
	if w, ok := worlds[t]; ok {
		return w
	}
	worldSeq++
	w := world{namespace: fmt.Sprintf("t%d", worldSeq), stateDir: t.TempDir()}
	worlds[t] = w
	t.Cleanup(func() {
		worldsMu.Lock()
		defer worldsMu.Unlock()
		delete(worlds, t)
	})
	return w
}

// exitCode runs cmd to completion and returns its exit code.
func exitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	code, _, _ := testenv.Run(t, cmd)
	return code
}

// running is a leasectl process whose child reports on stdout, one line per
// event ("pid N", "gc N", "ready", ...).
type running struct {
	*testenv.Process
	t *testing.T
}

func start(t *testing.T, cmd *exec.Cmd) *running {
	t.Helper()
	return &running{testenv.Start(t, cmd), t}
}

// pid waits for a "<prefix> N" line and returns N.
func (r *running) pid(prefix string) int {
	r.t.Helper()
	s, _ := r.Expect(prefix + " ")
	n, err := strconv.Atoi(s)
	if err != nil {
		r.t.Fatalf("bad pid line %q", s)
	}
	return n
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// Timing of the fault tests: short enough to keep the suite fast, long
// enough that a loaded machine does not miss heartbeats.
const (
	ttl       = 2 * time.Second
	heartbeat = 300 * time.Millisecond
	safety    = time.Second
)

func timing() []string {
	return []string{"--ttl", ttl.String(), "--heartbeat", heartbeat.String(), "--safety", safety.String()}
}

// childScript reports the child's pid and a backgrounded grandchild's, then
// waits.
const childScript = `echo pid $$; sleep 1000 & echo gc $!; wait`

func TestFrozenRedisKillsTheChildWithinTheSafetyWindow(t *testing.T) {
	srv, err := redistest.Start(redistest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	r := start(t, leasectl(t, srv, append([]string{"run", "--job", "frozen"}, append(timing(), "--", "sh", "-c", childScript)...)...))
	pid := r.pid("pid")
	r.pid("gc")
	// Let a few renewals through, then freeze: the last confirmed renewal
	// was sent before this instant.
	time.Sleep(2 * heartbeat)
	frozenAt := time.Now()
	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer srv.Thaw()
	died := testenv.DeathTime(t, pid)
	latency := died.Sub(frozenAt)
	t.Logf("child died %s after the freeze (safety %s)", latency, safety)
	if latency > safety+50*time.Millisecond {
		t.Errorf("child died %s after the freeze, want within safety + 50ms = %s", latency, safety+50*time.Millisecond)
	}
	if code := r.ExitCode(); code != 125 {
		t.Errorf("exit code %d, want 125 (lease lost)", code)
	}
}

// watchdogPrograms are the two ways leasectl runs its watchdog: the small
// leasectl-watchdog installed beside it, or, without it (`go install`),
// leasectl re-executing itself. with returns the command to run.
var watchdogPrograms = []struct {
	name string // the file name the watchdog process runs
	with func(t *testing.T, cmd *exec.Cmd) *exec.Cmd
}{
	{"leasectl-watchdog", func(_ *testing.T, cmd *exec.Cmd) *exec.Cmd { return cmd }},
	{"leasectl", func(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
		cmd.Path = testenv.Alone(t)
		cmd.Args[0] = cmd.Path
		return cmd
	}},
}

// runsProgram fails t unless process pid runs the program named name, with
// one P: a P costs a watchdog memory it has no use for.
func runsProgram(t *testing.T, pid int, name string) {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(exe) != name {
		t.Errorf("the watchdog runs %s, want %s", exe, name)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	if env := strings.Split(string(environ), "\x00"); !slices.Contains(env, "GOMAXPROCS=1") {
		t.Errorf("the watchdog runs without GOMAXPROCS=1 in its environment")
	}
}

func TestSupervisorSIGKILLedLeavesNoOrphans(t *testing.T) {
	for _, wd := range watchdogPrograms {
		t.Run(wd.name, func(t *testing.T) {
			r := start(t, wd.with(t, leasectl(t, redisSrv.Get(t), append([]string{"run", "--job", "killed"}, append(timing(), "--", "sh", "-c", childScript)...)...)))
			pid, gc := r.pid("pid"), r.pid("gc")
			runsProgram(t, watchdogOf(t, r.Cmd.Process.Pid), wd.name)
			killedAt := time.Now()
			if err := r.Cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			for _, p := range []int{pid, gc} {
				if d := testenv.DeathTime(t, p).Sub(killedAt); d > safety {
					t.Errorf("process %d outlived its SIGKILLed supervisor by %s, want within the safety window %s", p, d, safety)
				} else {
					t.Logf("process %d died %s after the supervisor", p, d)
				}
			}
			r.ExpectLog("watchdog: killing the child's process group: the supervisor vanished")
		})
	}
}

func TestSupervisorSIGSTOPpedIsFencedBeforeTheWaiterStarts(t *testing.T) {
	holder := start(t, leasectl(t, redisSrv.Get(t), append([]string{"run", "--job", "stopped"}, append(timing(), "--", "sh", "-c", childScript)...)...))
	pid, gc := holder.pid("pid"), holder.pid("gc")
	waiter := start(t, leasectl(t, redisSrv.Get(t), append([]string{"run", "--job", "stopped", "--wait"}, append(timing(), "--", "sh", "-c", "echo started; exec sleep 1000")...)...))
	stoppedAt := time.Now()
	if err := holder.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	childDied := testenv.DeathTime(t, pid)
	gcDied := testenv.DeathTime(t, gc)
	_, started := waiter.Expect("started")
	t.Logf("child died %s after SIGSTOP; waiter's child started %s after SIGSTOP", childDied.Sub(stoppedAt), started.Sub(stoppedAt))
	if d := childDied.Sub(stoppedAt); d > safety+50*time.Millisecond {
		t.Errorf("child of the stopped supervisor died %s later, want within the safety window", d)
	}
	if !started.After(childDied) || !started.After(gcDied) {
		t.Errorf("waiter's child started before the stopped holder's group died")
	}
	if alive(gc) {
		t.Errorf("grandchild %d still alive", gc)
	}
}

func TestHandoffWithWait(t *testing.T) {
	for _, tc := range []struct {
		name string
		srv  *redistest.Server
	}{{"redis", redisSrv.Get(t)}, {"embedded", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			release, releaseW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer releaseW.Close()
			hcmd := leasectl(t, tc.srv, "run", "--job", "handoff", "--", "sh", "-c", "echo started; read x; echo ending")
			hcmd.Stdin = release
			holder := start(t, hcmd)
			release.Close()
			holder.Expect("started")
			waiter := start(t, leasectl(t, tc.srv, "--log-level", "debug", "run", "--job", "handoff", "--wait", "--", "sh", "-c", "echo started"))
			waiter.ExpectLog("lease held; waiting")
			io.WriteString(releaseW, "go\n")
			_, ended := holder.Expect("ending")
			_, started := waiter.Expect("started")
			t.Logf("handoff on %s: %s from the holder's last line to the waiter's first", tc.name, started.Sub(ended))
			if c := holder.ExitCode(); c != 0 {
				t.Errorf("holder exit %d", c)
			}
			if c := waiter.ExitCode(); c != 0 {
				t.Errorf("waiter exit %d", c)
			}
		})
	}
}

func TestSIGTERMIsForwardedAndTheChildsCodeReturned(t *testing.T) {
	r := start(t, leasectl(t, redisSrv.Get(t), "run", "--job", "term", "--", "sh", "-c", `trap 'echo got-term; exit 42' TERM; echo ready; sleep 1000 & wait`))
	r.Expect("ready")
	if err := r.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r.Expect("got-term")
	if code := r.ExitCode(); code != 42 {
		t.Errorf("exit code %d, want the child's own 42", code)
	}
}

func TestSignalWhileWaitingEndsTheWaitCleanly(t *testing.T) {
	holder := start(t, leasectl(t, redisSrv.Get(t), "run", "--job", "waitsig", "--", "sh", "-c", "echo started; exec sleep 1000"))
	holder.Expect("started")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		waiter := start(t, leasectl(t, redisSrv.Get(t), "--log-level", "debug", "run", "--job", "waitsig", "--wait", "--", "sh", "-c", "echo started"))
		waiter.ExpectLog("lease held; waiting")
		waiter.Cmd.Process.Signal(sig)
		if code := waiter.ExitCode(); code != 128+int(sig) {
			t.Errorf("waiter ended by %s exited %d, want %d", sig, code, 128+int(sig))
		}
	}
}

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-exec.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		srv  *redistest.Server
	}{{"redis", redisSrv.Get(t)}, {"embedded", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(args ...string) int {
				t.Helper()
				return exitCode(t, leasectl(t, tc.srv, args...))
			}
			cases := []struct {
				name string
				args []string
				want int
			}{
				{"success", []string{"run", "--job", "codes", "--", "true"}, 0},
				{"child's own code", []string{"run", "--job", "codes", "--", "sh", "-c", "exit 3"}, 3},
				{"child killed by a signal", []string{"run", "--job", "codes-sig", "--", "sh", "-c", "kill -SEGV $$"}, 128 + int(syscall.SIGSEGV)},
				{"bad flag", []string{"run", "--job", "codes", "--bogus", "--", "true"}, 64},
				{"bad job ID", []string{"run", "--job", "a b", "--", "true"}, 64},
				{"bad duration relation", []string{"run", "--job", "codes", "--ttl", "3s", "--heartbeat", "2s", "--", "true"}, 64},
				{"non-positive duration", []string{"run", "--job", "codes", "--grace", "0s", "--", "true"}, 64},
				{"missing --", []string{"run", "--job", "codes", "true"}, 64},
				{"empty command", []string{"run", "--job", "codes", "--"}, 64},
				{"max-runtime", []string{"run", "--job", "codes", "--max-runtime", "200ms", "--", "sleep", "10"}, 124},
				{"not executable", []string{"run", "--job", "codes", "--", notExec}, 126},
				{"not found", []string{"run", "--job", "codes", "--", "no-such-command-leasectl"}, 127},
				{"free again after 127", []string{"run", "--job", "codes", "--", "true"}, 0},
				{"min-interval skip", []string{"run", "--job", "codes", "--min-interval", "1h", "--", "false"}, 0},
			}
			for _, c := range cases {
				if got := run(c.args...); got != c.want {
					t.Errorf("%s: exit %d, want %d", c.name, got, c.want)
				}
			}

			holder := start(t, leasectl(t, tc.srv, "run", "--job", "codes-held", "--", "sh", "-c", "echo started; exec sleep 1000"))
			holder.Expect("started")
			if got := run("run", "--job", "codes-held", "--", "true"); got != 75 {
				t.Errorf("held: exit %d, want 75", got)
			}
			if got := run("run", "--job", "codes-held", "--conflict-exit-code", "9", "--", "true"); got != 9 {
				t.Errorf("held with --conflict-exit-code 9: exit %d, want 9", got)
			}
			if got := run("run", "--job", "codes-held", "--wait-timeout", "300ms", "--", "true"); got != 75 {
				t.Errorf("--wait-timeout passed: exit %d, want 75", got)
			}

			for i := 0; i < 2; i++ { // the SEGV above was the first crash; two more quarantine at 3
				run("run", "--job", "codes-sig", "--", "sh", "-c", "kill -SEGV $$")
			}
			if got := run("run", "--job", "codes-sig", "--", "true"); got != 76 {
				t.Errorf("quarantined: exit %d, want 76", got)
			}
		})
	}
	if got := exitCode(t, leasectl(t, nil, "--store", "redis://127.0.0.1:1", "run", "--job", "codes", "--", "true")); got != 69 {
		t.Errorf("store unreachable: exit %d, want 69", got)
	}
}

func TestLeaseLostExitCode(t *testing.T) {
	// Covered with a frozen Redis in TestFrozenRedisKillsTheChildWithinTheSafetyWindow;
	// here the store loses the lease outright: another holder takes over
	// after the data is wiped, and renewal answers "not the holder".
	srv, err := redistest.Start(redistest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	r := start(t, leasectl(t, srv, append([]string{"run", "--job", "lost"}, append(timing(), "--", "sh", "-c", childScript)...)...))
	pid := r.pid("pid")
	if _, err := srv.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	testenv.DeathTime(t, pid)
	if code := r.ExitCode(); code != 125 {
		t.Errorf("exit code %d, want 125", code)
	}
}

func TestTenMegabytesOfStdoutByteForByte(t *testing.T) {
	data := make([]byte, 10<<20)
	rand.Read(data)
	src := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := leasectl(t, redisSrv.Get(t), "run", "--job", "stdout", "--", "cat", src)
	var out bytes.Buffer
	cmd.Stdout = &out
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("stdout differs: got %d bytes, want %d", out.Len(), len(data))
	}
}

func TestStdinReachesTheChild(t *testing.T) {
	cmd := leasectl(t, redisSrv.Get(t), "run", "--job", "stdin", "--", "cat")
	cmd.Stdin = strings.NewReader("to the child\n")
	var out bytes.Buffer
	cmd.Stdout = &out
	if code := exitCode(t, cmd); code != 0 || out.String() != "to the child\n" {
		t.Fatalf("exit %d, stdout %q; want 0 and the input", code, out.String())
	}
}

func TestInteractiveChildGetsTheTerminal(t *testing.T) {
	cmd := leasectl(t, redisSrv.Get(t), "--log-level", "warn", "run", "--job", "tty", "--", "sh", "-c", `read line; echo "got:$line"`)
	ptmx, err := pty.Start(cmd) // the pty is leasectl's controlling terminal
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if _, err := ptmx.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	var seen strings.Builder
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(ptmx)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(hangGuard)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("terminal closed before the child answered; saw %q", seen.String())
			}
			seen.WriteString(l + "\n")
			if strings.Contains(l, "got:hello") {
				if err := <-done; err != nil {
					t.Fatalf("leasectl: %v", err)
				}
				return
			}
		case <-timeout:
			cmd.Process.Kill()
			t.Fatalf("the interactive child never read the terminal (stopped by SIGTTIN?); saw %q", seen.String())
		}
	}
}

func TestDescendantsThatLeftTheGroupAreKilledAtTheEnd(t *testing.T) {
	// setsid puts the sleep in a session and group of its own; when the
	// child exits, the sleep is reparented to leasectl, the subreaper.
	r := start(t, leasectl(t, redisSrv.Get(t), "run", "--job", "escaped", "--", "sh", "-c", "setsid sleep 1000 & echo gc $!"))
	gc := r.pid("gc")
	if code := r.ExitCode(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	testenv.DeathTime(t, gc)
	if alive(gc) {
		t.Fatalf("process %d escaped the group and outlived the run", gc)
	}
}

func TestWatchdogKilledKillsTheChild(t *testing.T) {
	for _, prog := range watchdogPrograms {
		t.Run(prog.name, func(t *testing.T) {
			// The child's process group is led by the watchdog.
			r := start(t, prog.with(t, leasectl(t, redisSrv.Get(t), append([]string{"run", "--job", "wd-killed"}, append(timing(), "--", "sh", "-c",
				`echo pid $$; echo wd $(cut -d' ' -f5 /proc/$$/stat); exec sleep 1000`)...)...)))
			pid, wd := r.pid("pid"), r.pid("wd")
			if wd == pid {
				t.Fatalf("the child leads its own group %d; want the watchdog's", wd)
			}
			runsProgram(t, wd, prog.name)
			if err := syscall.Kill(wd, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			testenv.DeathTime(t, pid)
			if code := r.ExitCode(); code != 125 {
				t.Errorf("exit code %d, want 125: without its watchdog the run cannot keep its guarantee", code)
			}
		})
	}
}

func TestScanReportsAKilledSupervisorOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		srv  *redistest.Server
	}{{"redis", redisSrv.Get(t)}, {"embedded", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			r := start(t, leasectl(t, tc.srv, append([]string{"run", "--job", "reaped"}, append(timing(), "--", "sh", "-c", childScript)...)...))
			pid := r.pid("pid")
			if err := r.Cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			testenv.DeathTime(t, pid)
			time.Sleep(ttl + 100*time.Millisecond) // the lease's liveness runs out
			scan := func() []map[string]any {
				t.Helper()
				cmd := leasectl(t, tc.srv, "scan", "--json")
				var out bytes.Buffer
				cmd.Stdout = &out
				if code := exitCode(t, cmd); code != 0 {
					t.Fatalf("scan exit %d", code)
				}
				var crashes []map[string]any
				if err := json.Unmarshal(out.Bytes(), &crashes); err != nil {
					t.Fatalf("scan --json: %v\n%s", err, out.String())
				}
				return crashes
			}
			first := scan()
			if len(first) != 1 || first[0]["job"] != "reaped" || first[0]["crashes"] != 1.0 {
				t.Fatalf("first scan found %v, want the one crash of job reaped", first)
			}
			if again := scan(); len(again) != 0 {
				t.Fatalf("second scan found %v again, want nothing: a crash is counted once", again)
			}
		})
	}
}

func TestSIGKILLAfterGraceGives137(t *testing.T) {
	// The child ignores SIGTERM; after --grace the group, its watchdog
	// included, gets SIGKILL, and the run ends with the child's 137.
	r := start(t, leasectl(t, redisSrv.Get(t), "run", "--job", "grace", "--grace", "300ms", "--", "sh", "-c", `trap '' TERM; echo ready; exec sleep 1000`))
	r.Expect("ready")
	if err := r.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := r.ExitCode(); code != 137 {
		t.Errorf("exit code %d, want 137 (SIGKILL after --grace)", code)
	}
}

func TestStarvedWatchdogDoesNotKillOnADeadlineAlreadyMoved(t *testing.T) {
	// The watchdog is stopped (as the scheduler of a saturated machine
	// would leave it) across several renewals, well past the deadline it
	// knew; when it runs again, the newer deadlines are waiting in its pipe.
	cmd := leasectl(t, nil, append([]string{"run", "--job", "starved"}, append(timing(), "--", "sh", "-c",
		`echo wd $(cut -d' ' -f5 /proc/$$/stat); read x; echo done`)...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, cmd)
	wd := r.pid("wd")
	if err := syscall.Kill(wd, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * safety) // the fault: renewals go on, the watchdog does not run
	if err := syscall.Kill(wd, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Watch for a kill for a safety window after it runs again.
	time.Sleep(safety)
	io.WriteString(stdin, "go\n")
	r.Expect("done")
	if code := r.ExitCode(); code != 0 {
		t.Fatalf("exit code %d, want the child's own 0: the watchdog killed the group on a deadline the supervisor had moved", code)
	}
	var st struct {
		Crashes     int `json:"crashes"`
		LastOutcome struct {
			Result string `json:"result"`
		} `json:"last_outcome"`
	}
	status := leasectl(t, nil, "status", "starved", "--json")
	out, err := status.Output()
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if st.Crashes != 0 || !strings.EqualFold(st.LastOutcome.Result, "completed") {
		t.Errorf("status: %d crashes, last outcome %q; want 0 and completed", st.Crashes, st.LastOutcome.Result)
	}
}

func TestWatchdogGoneBeforeTheChildStartsIsALostLease(t *testing.T) {
	// The group the child is to join is gone before it starts, as when the
	// run froze between its deadline check and the fork while the watchdog
	// killed the still empty group: here the waiting run's watchdog is
	// killed while it waits for the lease.
	release, releaseW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer releaseW.Close()
	hcmd := leasectl(t, nil, "run", "--job", "gone", "--", "sh", "-c", "echo started; read x")
	hcmd.Stdin = release
	holder := start(t, hcmd)
	release.Close()
	holder.Expect("started")
	waiter := start(t, leasectl(t, nil, "--log-level", "debug", "run", "--job", "gone", "--wait", "--", "sh", "-c", "echo started"))
	waiter.ExpectLog("lease held; waiting")
	wd := watchdogOf(t, waiter.Cmd.Process.Pid)
	if err := syscall.Kill(wd, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	reaped(t, wd)
	io.WriteString(releaseW, "go\n")
	if code := holder.ExitCode(); code != 0 {
		t.Fatalf("holder exit %d", code)
	}
	if code := waiter.ExitCode(); code != 125 {
		t.Errorf("exit code %d, want 125: the lease was lost before the child started, the command is not to blame (126)", code)
	}
}

// watchdogOf returns the pid of the watchdog process of the leasectl
// process pid, its child running `__watchdog`.
func watchdogOf(t *testing.T, pid int) int {
	t.Helper()
	// The watchdog is forked in the background: until it has exec'd, its
	// command line is still leasectl's own. Nothing signals the exec, so
	// this looks every millisecond, up to hangGuard.
	deadline := time.Now().Add(hangGuard)
	for {
		// Each thread lists the children it forked.
		lists, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		if err != nil || len(lists) == 0 {
			t.Skipf("cannot list the children of %d: %v", pid, err)
		}
		var children []byte
		for _, l := range lists {
			b, _ := os.ReadFile(l)
			children = append(children, b...)
		}
		for _, f := range strings.Fields(string(children)) {
			cmdline, _ := os.ReadFile("/proc/" + f + "/cmdline")
			if strings.Contains(string(cmdline), "__watchdog") {
				n, _ := strconv.Atoi(f)
				return n
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("leasectl %d has no watchdog among its children %q after %s", pid, children, hangGuard)
		}
		time.Sleep(time.Millisecond)
	}
}

// reaped waits until pid's parent has reaped it. Reaping by another process
// raises no event a test can wait on, so this looks every millisecond.
func reaped(t *testing.T, pid int) {
	t.Helper()
	testenv.DeathTime(t, pid)
	for end := time.Now().Add(hangGuard); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
			return
		}
	}
	t.Fatalf("process %d was not reaped", pid)
}

// leasectlAt is leasectl against the store at url.
func leasectlAt(t *testing.T, url string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := leasectl(t, nil, args...)
	cmd.Env = append(cmd.Env, "LEASECTL_STORE="+url)
	return cmd
}

// behindProxy starts a Redis of the test's own, with a fault proxy in front
// of it, and returns the proxy and the URLs through it and direct. The
// Redis is fresh, so its script cache is empty: a script whose EVALSHA is
// answered NOSCRIPT behind a dropped reply does not run.
func behindProxy(t *testing.T) (p *faultproxy.Proxy, through, direct string) {
	t.Helper()
	srv, err := redistest.Start(redistest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if p, err = faultproxy.Start(u.Host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	through = "redis://" + p.Addr() + u.Path
	return p, through, srv.URL
}

// jobStatus reads job's status as `leasectl status --json` prints it.
func jobStatus(t *testing.T, url, job string) map[string]any {
	t.Helper()
	out, err := leasectlAt(t, url, "status", job, "--json").Output()
	if err != nil {
		t.Fatalf("status %s: %v", job, err)
	}
	var st map[string]any
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return st
}

func TestPartitionedRunsAreNotCrashes(t *testing.T) {
	// Three partitions in a row, each cutting a run off its store past its
	// TTL: the run is killed at its deadline (125) and its release cannot
	// get through, so its crash is counted by a reaper elsewhere. Its
	// outcome waits in the host's outbox, and the host's next run delivers
	// it: the crash is withdrawn, the job never quarantined.
	p, through, direct := behindProxy(t)
	args := append([]string{"run", "--job", "part", "--max-crashes", "3"}, append(timing(), "--", "sh", "-c", "echo started; exec sleep 1000")...)
	for round := 1; round <= 3; round++ {
		p.Set(faultproxy.Pass)
		r := start(t, leasectlAt(t, through, args...))
		r.Expect("started")
		p.Set(faultproxy.DropBoth)
		if code := r.ExitCode(); code != 125 {
			t.Fatalf("round %d: exit %d, want 125: the partition took the lease", round, code)
		}
		// A reaper elsewhere counts the run's crash once its TTL is over.
		time.Sleep(ttl)
		scan := leasectlAt(t, direct, "scan")
		if code := exitCode(t, scan); code != 0 {
			t.Fatalf("round %d: scan exit %d", round, code)
		}
		if st := jobStatus(t, direct, "part"); st["crashes"] != 1.0 {
			t.Fatalf("round %d: %v crashes during the partition, want 1: the crash was counted before the outcome came", round, st["crashes"])
		}
	}
	p.Set(faultproxy.Pass)
	// The host's next leasectl (here its reaper) delivers the last outcome.
	if code := exitCode(t, leasectlAt(t, through, "scan")); code != 0 {
		t.Fatalf("scan through the healed link: exit %d", code)
	}
	st := jobStatus(t, direct, "part")
	last, _ := st["last_outcome"].(map[string]any)
	if st["crashes"] != 0.0 || st["state"] != "IDLE" || last == nil || !strings.EqualFold(fmt.Sprint(last["result"]), "failed") {
		t.Errorf("after the partitions healed: crashes %v, state %v, last outcome %v; want 0, IDLE, failed (lease lost)", st["crashes"], st["state"], last)
	}
}

func TestGrantWhoseAnswerIsLostIsReleased(t *testing.T) {
	// Replies are dropped while requests arrive: the store grants the
	// acquire, its answer never comes, and the run gives up (69). The grant
	// must not hold the job for a TTL under a name nobody runs, nor count
	// as a crash, once the host can tell the store.
	p, through, direct := behindProxy(t)
	// The grant outlives the run's giving up: two asks, each copied for
	// its --safety, then the word to the store, bounded by --safety too.
	long := []string{"--ttl", "30s", "--heartbeat", "2s", "--safety", "5s"}
	// Load the acquire script, as a store in use has it.
	if code := exitCode(t, leasectlAt(t, through, append(append([]string{"run", "--job", "warm"}, long...), "--", "true")...)); code != 0 {
		t.Fatalf("warm-up run: exit %d", code)
	}
	p.Set(faultproxy.DropReplies)
	if code := exitCode(t, leasectlAt(t, through, append(append([]string{"run", "--job", "ghost"}, long...), "--", "true")...)); code != 69 {
		t.Fatalf("exit %d, want 69: no answer to the acquire", code)
	}
	p.Set(faultproxy.Pass)
	// The host's next leasectl delivers what the run could not say.
	if code := exitCode(t, leasectlAt(t, through, "scan")); code != 0 {
		t.Fatalf("scan through the healed link: exit %d", code)
	}
	st := jobStatus(t, direct, "ghost")
	if st["state"] != "IDLE" || st["holder"] != nil {
		t.Errorf("state %v holder %v, want IDLE: the grant nobody ran is released", st["state"], st["holder"])
	}
	if code := exitCode(t, leasectlAt(t, direct, append(append([]string{"run", "--job", "ghost"}, long...), "--", "true")...)); code != 0 {
		t.Errorf("the next run: exit %d, want 0, not held by the run that gave up", code)
	}
	if st := jobStatus(t, direct, "ghost"); st["crashes"] != 0.0 {
		t.Errorf("%v crashes, want 0", st["crashes"])
	}
}

func TestSlowLinkIsWarnedAboutAndShown(t *testing.T) {
	// Replies take 150 ms: a renewal's round trip is about 60% of the
	// margin --safety 1s - --heartbeat 750ms = 250ms.
	p, through, direct := behindProxy(t)
	// Load the scripts first, as a store in use has them: a NOSCRIPT
	// answer would cost an extra round trip.
	if code := exitCode(t, leasectlAt(t, through, "run", "--job", "warm", "--ttl", "900ms", "--", "sleep", "0.5")); code != 0 {
		t.Fatalf("warm-up run: exit %d", code)
	}
	p.Delay(150 * time.Millisecond)
	r := start(t, leasectlAt(t, through, "run", "--job", "slow", "--ttl", "3s", "--heartbeat", "750ms", "--safety", "1s",
		"--", "sh", "-c", "echo started; exec sleep 1000"))
	r.Expect("started")
	r.ExpectLog("renewal round trip")
	// The round trip the supervisor measured goes with its next renewal.
	var rtt float64
	for end := time.Now().Add(hangGuard); rtt == 0 && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		out, err := leasectlAt(t, direct, "ls", "--json").Output()
		if err != nil {
			t.Fatalf("ls: %v", err)
		}
		var leases []map[string]any
		if err := json.Unmarshal(out, &leases); err != nil || len(leases) != 1 {
			t.Fatalf("ls --json: %v\n%s", err, out)
		}
		rtt, _ = leases[0]["last_rtt_ms"].(float64)
	}
	if rtt < 150 {
		t.Errorf("ls shows a last round trip of %vms, want at least the 150ms the replies are held", rtt)
	}
	holder, _ := jobStatus(t, direct, "slow")["holder"].(map[string]any)
	if got, _ := holder["last_rtt_ms"].(float64); got < 150 {
		t.Errorf("status shows the holder %v with a last round trip of %vms, want at least 150ms", holder, got)
	}
}

func TestWhatCountsAsACrashWithTheBinary(t *testing.T) {
	// Three runs of each ending, at the default --max-crashes 3: a child
	// that crashed three times quarantines the job; one whose reader went
	// away or that someone asked to stop does not.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	waitsToBeKilled := []string{"sh", "-c", "echo pid $$; exec sleep 1000"}
	tests := []struct {
		name       string
		child      []string
		crash      string         // crashEnv's value, for this test binary as the child
		readerGone bool           // the child's stdout is a pipe nobody reads
		kill       syscall.Signal // sent to the child by someone else; 0: none
		signal     syscall.Signal // what the child dies of
		want       string         // the last outcome's result
	}{
		{name: "real SIGSEGV", child: []string{self}, crash: "segv", signal: syscall.SIGSEGV, want: "CRASHED"},
		{name: "real SIGABRT", child: []string{self}, crash: "abort", signal: syscall.SIGABRT, want: "CRASHED"},
		{name: "SIGKILL from someone else", child: waitsToBeKilled, kill: syscall.SIGKILL, signal: syscall.SIGKILL, want: "CRASHED"},
		{name: "SIGPIPE, its reader gone", child: []string{"seq", "1", "1000000"}, readerGone: true, signal: syscall.SIGPIPE, want: "FAILED"},
		{name: "SIGTERM from someone else", child: waitsToBeKilled, kill: syscall.SIGTERM, signal: syscall.SIGTERM, want: "FAILED"},
		{name: "SIGHUP from someone else", child: waitsToBeKilled, kill: syscall.SIGHUP, signal: syscall.SIGHUP, want: "FAILED"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for i := 1; i <= 3; i++ {
				cmd := leasectl(t, nil, append([]string{"run", "--job", "p", "--"}, tc.child...)...)
				cmd.Env = append(cmd.Env, crashEnv+"="+tc.crash)
				var code int
				switch {
				case tc.readerGone:
					cmd.Stdout = readerGone(t)
					code = exitCode(t, cmd)
				case tc.kill != 0:
					r := start(t, cmd)
					if err := syscall.Kill(r.pid("pid"), tc.kill); err != nil {
						t.Fatal(err)
					}
					code = r.ExitCode()
				default:
					code = exitCode(t, cmd)
				}
				if want := 128 + int(tc.signal); code != want {
					t.Fatalf("run %d: exit %d, want %d", i, code, want)
				}
			}
			st := jobStatus(t, "", "p")
			last, _ := st["last_outcome"].(map[string]any)
			wantState, wantCrashes := "IDLE", 0.0
			if tc.want == "CRASHED" {
				wantState, wantCrashes = "QUARANTINED", 3
			}
			if st["state"] != wantState || st["crashes"] != wantCrashes || last["result"] != tc.want || last["signal"] != float64(tc.signal) {
				t.Errorf("status after three runs: state %v, crashes %v, last outcome %v; want %s, %v crashes, %s by signal %d",
					st["state"], st["crashes"], last, wantState, wantCrashes, tc.want, tc.signal)
			}
		})
	}
}

// readerGone is a stdout whose reader has gone, as `leasectl run ... |
// head -1` has once head exited: a child's next write to it gets SIGPIPE.
func readerGone(t *testing.T) *os.File {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	t.Cleanup(func() { w.Close() })
	return w
}

func TestEmbeddedTakeoverOnceTheHoldersProcessesAreGone(t *testing.T) {
	// --ttl 30m: only the proof that the holder's processes are gone from
	// this host can let the next run in before the half hour is over.
	holder := start(t, leasectl(t, nil, "run", "--job", "gone", "--ttl", "30m", "--", "sh", "-c", childScript))
	child, gc := holder.pid("pid"), holder.pid("gc")
	wd := watchdogOf(t, holder.Cmd.Process.Pid)
	// The test holds the watchdog's pipes open too, as the supervisor
	// does: the watchdog does not learn of the supervisor's death, and its
	// group outlives it (the parent-death signal kills the child, not its
	// background grandchild). Nobody may take the job while the
	// grandchild runs.
	var pipes []*os.File
	for _, fd := range []struct {
		n    int
		flag int
	}{{0, os.O_WRONLY}, {1, os.O_RDONLY}} {
		f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", wd, fd.n), fd.flag, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		pipes = append(pipes, f)
	}
	if err := holder.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testenv.DeathTime(t, child)
	if code := exitCode(t, leasectl(t, nil, "run", "--job", "gone", "--", "true")); code != 75 || !alive(gc) {
		t.Fatalf("with the holder's grandchild alive (%v): exit %d, want 75", alive(gc), code)
	}
	if st := jobStatus(t, "", "gone"); st["state"] != "RUNNING" {
		t.Errorf("status %v with the holder's grandchild alive, want RUNNING", st["state"])
	}

	// Its pipes closed, the watchdog finds the supervisor gone and kills
	// the group.
	for _, f := range pipes {
		f.Close()
	}
	testenv.DeathTime(t, gc)
	testenv.DeathTime(t, wd)
	st := jobStatus(t, "", "gone")
	crashed, _ := st["crashed"].(map[string]any)
	if st["state"] != "CRASHED" || crashed["pid"] != float64(holder.Cmd.Process.Pid) {
		t.Errorf("status %v, crashed %v once the holder's processes are gone; want CRASHED, pid %d", st["state"], crashed, holder.Cmd.Process.Pid)
	}
	if code := exitCode(t, leasectl(t, nil, "run", "--job", "gone", "--", "true")); code != 0 {
		t.Fatalf("the next run: exit %d, want 0 at once", code)
	}
	var crashes int
	for _, ev := range jobStatus(t, "", "gone")["history"].([]any) {
		if e := ev.(map[string]any); e["event"] == "crashed" && e["worker"] == crashed["worker"] {
			crashes++
		}
	}
	if crashes != 1 {
		t.Errorf("%d crashed events of the holder, want its crash counted once", crashes)
	}
}

func TestEmbeddedWaiterTakesOverOnceTheHoldersProcessesAreGone(t *testing.T) {
	// --ttl 30m: the waiter wakes when the holder's supervisor exits, and
	// takes the job once its watchdog killed the group, not half an hour
	// later.
	holder := start(t, leasectl(t, nil, "run", "--job", "gone", "--ttl", "30m", "--", "sh", "-c", "echo started; exec sleep 1000"))
	holder.Expect("started")
	waiter := start(t, leasectl(t, nil, "--log-level", "debug", "run", "--job", "gone", "--wait", "--ttl", "30m", "--", "sh", "-c", "echo started"))
	waiter.ExpectLog("lease held; waiting")
	killed := time.Now()
	if err := holder.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, started := waiter.Expect("started")
	t.Logf("failover: %s from the SIGKILL to the waiter's child", started.Sub(killed))
	if c := waiter.ExitCode(); c != 0 {
		t.Errorf("waiter exit %d", c)
	}
}
