package supervise_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/leasectl/leasectl/internal/testenv"
)

// shell is an interactive bash with job control, in a pseudo-terminal of its
// own, as a user's terminal runs it.
type shell struct {
	t    *testing.T
	ptmx *os.File
	cmd  *exec.Cmd

	mu     sync.Mutex
	out    bytes.Buffer
	seen   int           // output before this offset has been matched
	change chan struct{} // a value after each read
}

func startShell(t *testing.T) *shell {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatal("bash not found: the job-control tests need an interactive bash")
	}
	// The environment leasectl() gives the binary: the test's namespace,
	// store and log format.
	env := leasectl(t, redisSrv.Get(t)).Env
	cmd := exec.Command("bash", "--norc", "--noprofile", "-i")
	cmd.Env = append(env, "PS1=$ ", "TERM=dumb", "LEASECTL_LOG_FORMAT=console")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 200})
	if err != nil {
		t.Fatal(err)
	}
	sh := &shell{t: t, ptmx: ptmx, cmd: cmd, change: make(chan struct{}, 1)}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			sh.mu.Lock()
			sh.out.Write(buf[:n])
			sh.mu.Unlock()
			select {
			case sh.change <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		ptmx.Close()
		t.Logf("the terminal showed:\n%s", sh.output())
	})
	sh.await(`\$ $`)
	return sh
}

func (sh *shell) output() string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.out.String()
}

// type writes keys to the terminal as a user types them.
func (sh *shell) typ(keys string) {
	sh.t.Helper()
	if _, err := sh.ptmx.Write([]byte(keys)); err != nil {
		sh.t.Fatal(err)
	}
}

// await waits until the terminal shows, after what earlier awaits matched,
// text matching re, and returns the first submatch (or the match).
func (sh *shell) await(re string) string {
	sh.t.Helper()
	want := regexp.MustCompile(re)
	timeout := time.After(hangGuard)
	for {
		sh.mu.Lock()
		rest := sh.out.String()[sh.seen:]
		m := want.FindStringSubmatchIndex(rest)
		if m != nil {
			sh.seen += m[1]
			sh.mu.Unlock()
			if len(m) > 2 && m[2] >= 0 {
				return rest[m[2]:m[3]]
			}
			return rest[m[0]:m[1]]
		}
		sh.mu.Unlock()
		select {
		case <-sh.change:
		case <-timeout:
			sh.t.Fatalf("the terminal never showed %q; after the last match it showed %q", re, rest)
		}
	}
}

// run types a leasectl command line for the shell to run.
func (sh *shell) run(args ...string) {
	sh.t.Helper()
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	bin, err := testenv.Leasectl()
	if err != nil {
		sh.t.Fatal(err)
	}
	sh.typ(bin + " " + strings.Join(quoted, " ") + "\n")
}

// status types `echo rc=$?` and returns the exit status of the last job.
func (sh *shell) status() int {
	sh.t.Helper()
	sh.typ("echo rc=$?\n")
	n, err := strconv.Atoi(sh.await(`(?m)^rc=(\d+)\r?$`))
	if err != nil {
		sh.t.Fatal(err)
	}
	return n
}

// awaitForeground waits until the terminal's foreground process group is
// that of process pid: the child has the terminal again. (Nothing tells
// when a group gets a terminal, so it is asked until it does.)
func (sh *shell) awaitForeground(pid int) {
	sh.t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		sh.t.Fatal(err)
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	pgid, err := strconv.Atoi(fields[2]) // state, ppid, pgrp
	if err != nil {
		sh.t.Fatal(err)
	}
	deadline := time.Now().Add(hangGuard)
	for {
		fg, err := unix.IoctlGetInt(int(sh.ptmx.Fd()), unix.TIOCGPGRP)
		if err == nil && fg == pgid {
			return
		}
		if time.Now().After(deadline) {
			sh.t.Fatalf("the terminal's foreground group is %d (%v), not the child's %d", fg, err, pgid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readyPid waits for the interactive child's "ready PID" line.
func (sh *shell) readyPid() int {
	sh.t.Helper()
	pid, err := strconv.Atoi(sh.await(`ready (\d+)`))
	if err != nil {
		sh.t.Fatal(err)
	}
	// A failing test may leave the run stopped, where the shell's death
	// does not reach it: kill the child and its supervisor, by pid.
	supervisor := ppid(sh.t, pid)
	sh.t.Cleanup(func() {
		_ = unix.Kill(supervisor, unix.SIGKILL)
		_ = unix.Kill(pid, unix.SIGKILL)
	})
	return pid
}

// ppid is the parent of process pid.
func ppid(t *testing.T, pid int) int {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	n, err := strconv.Atoi(fields[1]) // state, ppid
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// interactiveChild reads a line from the terminal and echoes it.
var interactiveChild = []string{"--", "sh", "-c", `echo "ready $$"; read line; echo "got:$line"`}

// TestCtrlZGivesTheShellBackAndFgResumes stops an interactive run with
// Ctrl-Z in a real terminal: the shell gets the terminal back (it reports
// the job stopped and runs the next command), `fg` resumes the run, whose
// child reads the terminal again; and after a second Ctrl-Z and `fg`,
// Ctrl-C ends the child as it would without leasectl.
func TestCtrlZGivesTheShellBackAndFgResumes(t *testing.T) {
	sh := startShell(t)
	sh.run(append([]string{"run", "--job", "ctrlz"}, interactiveChild...)...)
	sh.readyPid()
	sh.typ("\x1a") // Ctrl-Z
	sh.await(`Stopped`)
	sh.await(`\$ $`)
	sh.typ("echo shell-is-back\n")
	sh.await(`(?m)^shell-is-back\r?$`)
	sh.typ("fg\n")
	sh.await(`ctrlz`) // bash echoes the job it resumes
	sh.typ("hello\n")
	sh.await(`got:hello`)
	sh.await(`\$ $`)
	if rc := sh.status(); rc != 0 {
		t.Errorf("the resumed run exited %d, want 0", rc)
	}

	sh.run(append([]string{"run", "--job", "ctrlz"}, interactiveChild...)...)
	pid := sh.readyPid()
	sh.typ("\x1a")
	sh.await(`Stopped`)
	sh.await(`\$ $`)
	sh.typ("fg\n")
	sh.awaitForeground(pid) // a Ctrl-C before bash hands over the terminal goes to bash
	sh.typ("\x03")          // Ctrl-C
	sh.await(`\$ $`)
	if rc := sh.status(); rc != 130 {
		t.Errorf("the run ended by Ctrl-C exited %d, want 130", rc)
	}
}

// TestStoppedPastTheSafetyWindowLosesTheLease: nothing renews the lease of
// a stopped run, so its child is killed when the safety window runs out,
// as for any frozen supervisor; `fg` then ends the run as lease lost (125).
func TestStoppedPastTheSafetyWindowLosesTheLease(t *testing.T) {
	sh := startShell(t)
	sh.run(append(append([]string{"run", "--job", "stopped"}, timing()...), interactiveChild...)...)
	pid := sh.readyPid()
	sh.typ("\x1a")
	sh.await("nothing renews the lease while stopped")
	sh.await(`Stopped`)
	testenv.DeathTime(t, pid) // killed by the watchdog at the deadline
	sh.typ("fg\n")
	if rc := sh.status(); rc != 125 {
		t.Errorf("a run stopped past its safety window exited %d, want 125 (lease lost)", rc)
	}
}
