package cmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/leasectl/leasectl/internal/testenv"
)

// terminal is leasectl running with a pseudo-terminal as its controlling
// terminal and its stdin, stdout and stderr, as in an interactive shell.
type terminal struct {
	t    *testing.T
	cmd  *exec.Cmd
	ptmx *os.File

	mu     sync.Mutex
	out    bytes.Buffer
	change chan struct{} // a value after each read
	eof    chan struct{} // closed when the terminal has no writer left
}

// inTerminal starts the built binary with args in a terminal of its own.
func inTerminal(t *testing.T, env []string, args ...string) *terminal {
	t.Helper()
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	return startTerminal(t, cmd)
}

// underShell starts the built binary with args from a shell in a terminal
// of its own, the shell being the session leader, as in a user's terminal.
func underShell(t *testing.T, env []string, args ...string) *terminal {
	t.Helper()
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", append([]string{"-c", `"$0" "$@"; echo "leasectl ended"; exec sleep 1000`, bin}, args...)...)
	cmd.Env = env
	return startTerminal(t, cmd)
}

// startTerminal starts cmd with a terminal of its own.
func startTerminal(t *testing.T, cmd *exec.Cmd) *terminal {
	t.Helper()
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	term := &terminal{t: t, cmd: cmd, ptmx: ptmx, change: make(chan struct{}, 1), eof: make(chan struct{})}
	go func() {
		defer close(term.eof)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			term.mu.Lock()
			term.out.Write(buf[:n])
			term.mu.Unlock()
			select {
			case term.change <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		ptmx.Close()
	})
	return term
}

// output is what the terminal showed so far.
func (term *terminal) output() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return term.out.String()
}

// await waits until the terminal showed text matching re, and returns it.
func (term *terminal) await(re string) string {
	term.t.Helper()
	want := regexp.MustCompile(re)
	timeout := time.After(binaryHangGuard)
	for !want.MatchString(term.output()) {
		select {
		case <-term.change:
		case <-term.eof:
			if !want.MatchString(term.output()) {
				term.t.Fatalf("the terminal closed without showing %q; it showed %q", re, term.output())
			}
		case <-timeout:
			term.t.Fatalf("the terminal never showed %q; it showed %q", re, term.output())
		}
	}
	return want.FindString(term.output())
}

// awaitIgnored waits until process pid ignores sig, as the watchdog does
// once ready. (Nothing tells when a process changes what it ignores, so
// /proc is asked until it does.)
func awaitIgnored(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	deadline := time.Now().Add(binaryHangGuard)
	for {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(status), "\n") {
			if mask, ok := strings.CutPrefix(line, "SigIgn:\t"); ok {
				if bits, err := strconv.ParseUint(mask, 16, 64); err == nil && bits&(1<<(uint(sig)-1)) != 0 {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d never ignored %s", pid, sig)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitDeath waits for process pid to exit, with a pidfd (an event, not
// polling).
func awaitDeath(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return
	}
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", pid, err)
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(binaryHangGuard/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			t.Fatalf("process %d did not exit: %v", pid, err)
		}
		return
	}
}

// exit waits for leasectl to exit and for everything it and its group
// wrote, and returns its exit code (-1 if a signal killed it).
func (term *terminal) exit() int {
	term.t.Helper()
	done := make(chan error, 1)
	go func() { done <- term.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			term.t.Fatal(err)
		}
	case <-time.After(binaryHangGuard):
		term.t.Fatalf("leasectl did not exit; the terminal showed %q", term.output())
	}
	select {
	case <-term.eof:
	case <-time.After(binaryHangGuard):
		term.t.Fatalf("something still holds the terminal; it showed %q", term.output())
	}
	return term.cmd.ProcessState.ExitCode()
}

// terminalLines splits what a terminal showed into lines.
func terminalLines(out string) []string {
	var ls []string
	for _, l := range strings.Split(strings.ReplaceAll(out, "\r\n", "\n"), "\n") {
		if l != "" {
			ls = append(ls, l)
		}
	}
	return ls
}

// TestEveryLineIsJSONInATerminal: with --log-format json, every line
// leasectl writes on a terminal is a JSON record: the wait, the refusal, a
// command that cannot run, and the watchdog's last word when the
// supervisor vanishes.
func TestEveryLineIsJSONInATerminal(t *testing.T) {
	env := append(userEnv(t), "LEASECTL_STORE=file://"+filepath.Join(t.TempDir(), "store"), "LEASECTL_LOG_FORMAT=json")
	holdJob(t, env, "held")
	wantJSON := func(what string, out string, saying ...string) {
		t.Helper()
		ls := terminalLines(out)
		if len(ls) == 0 {
			t.Errorf("%s: the terminal showed nothing", what)
		}
		for _, l := range ls {
			var rec map[string]any
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Errorf("%s: line %q is not JSON: %v", what, l, err)
			}
		}
		for _, s := range saying {
			if !strings.Contains(out, s) {
				t.Errorf("%s: the terminal showed %q, which does not say %q", what, out, s)
			}
		}
	}

	term := inTerminal(t, env, "-v", "run", "--job", "held", "--wait-timeout", "500ms", "--", "true")
	if code := term.exit(); code != 75 {
		t.Errorf("a wait that timed out: exit %d, want 75", code)
	}
	wantJSON("a wait that timed out", term.output(), `"message":"waiting for the lease"`, "gave up after waiting")

	term = inTerminal(t, env, "run", "--job", "j", "--", "no-such-command-leasectl")
	if code := term.exit(); code != 127 {
		t.Errorf("a command not found: exit %d, want 127", code)
	}
	wantJSON("a command not found", term.output(), "command not found")

	// The supervisor dies; its shell, the session's leader, keeps the
	// terminal open for the watchdog's last word. The child says who its
	// supervisor is, and its group's leader, the watchdog.
	term = underShell(t, env, "run", "--job", "vanishing", "--", "sh", "-c",
		`echo "started $PPID $(cut -d' ' -f5 /proc/$$/stat)"; exec sleep 1000`)
	m := regexp.MustCompile(`started (\d+) (\d+)\r\n`).FindStringSubmatch(term.await(`started \d+ \d+\r\n`))
	supervisor, _ := strconv.Atoi(m[1])
	watchdog, _ := strconv.Atoi(m[2])
	// The child may start before its watchdog is ready; until then the
	// watchdog has not read the run's token, which its last word carries.
	awaitIgnored(t, watchdog, syscall.SIGUSR1)
	if err := syscall.Kill(supervisor, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitDeath(t, watchdog)
	term.await("leasectl ended")
	out := regexp.MustCompile(`started \d+ \d+\r\n|leasectl ended\r\n|Killed\r\n`).ReplaceAllString(term.output(), "") // the child's and the shell's lines
	wantJSON("the watchdog's last word", out, `"job":"vanishing"`, `"token":`, "watchdog: killing the child's process group: the supervisor vanished")
}

// TestConsoleLinesStartOnTheirOwnLine: on a terminal in the console
// format, the line --wait keeps up is cleared when the wait ends, so what
// comes next (the child's output, leasectl's last word) starts a line of
// its own.
func TestConsoleLinesStartOnTheirOwnLine(t *testing.T) {
	env := append(userEnv(t), "LEASECTL_STORE=file://"+filepath.Join(t.TempDir(), "store"))
	holdJob(t, env, "held")
	term := inTerminal(t, env, "run", "--job", "held", "--wait-timeout", "500ms", "--", "true")
	if code := term.exit(); code != 75 {
		t.Errorf("exit %d, want 75", code)
	}
	out := term.output()
	if !strings.Contains(out, "waiting for job held: held by ") {
		t.Errorf("the terminal showed no waiting line: %q", out)
	}
	if !regexp.MustCompile(`(\r\x1b\[K|\n)leasectl: gave up after waiting [^\n]*\r\n$`).MatchString(out) {
		t.Errorf("leasectl's last word does not start and end a line of its own: %q", out)
	}

	env2 := append(userEnv(t), "LEASECTL_STORE=file://"+filepath.Join(t.TempDir(), "store"))
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	holder := exec.Command(bin, "run", "--job", "handoff", "--", "sh", "-c", "echo started; read line; true")
	holder.Env = env2
	release, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	holderOut, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	buf := make([]byte, len("started\n"))
	if _, err := holderOut.Read(buf); err != nil {
		t.Fatal(err)
	}
	term = inTerminal(t, env2, "run", "--job", "handoff", "--wait", "--", "echo", "my turn")
	term.await("waiting for job handoff")
	release.Close()
	if code := term.exit(); code != 0 {
		t.Errorf("the waiter: exit %d, want 0; the terminal showed %q", code, term.output())
	}
	if out := term.output(); !regexp.MustCompile(`(\r\x1b\[K|\n)my turn\r\n$`).MatchString(out) {
		t.Errorf("the child's output does not start a line of its own: %q", out)
	}
}
