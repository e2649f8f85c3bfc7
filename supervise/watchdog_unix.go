//go:build unix

package supervise

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasectl/leasectl/internal/watchdog"
)

// The watchdog process and the lines it reads and writes are package
// internal/watchdog's; this is the supervisor's end of it.

// processWatchdog is the supervisor's end of a watchdog process.
type processWatchdog struct {
	cmd   *exec.Cmd
	w     *os.File
	ready chan struct{} // closed when the watchdog said it is ready
	fired chan struct{} // closed when it said it is killing the group at the deadline
	done  chan struct{} // closed once the process was reaped and its output read
}

// watchdogWriteTimeout bounds a write to the watchdog, so a stopped watchdog
// whose pipe filled up cannot block the supervisor's loop.
const watchdogWriteTimeout = 10 * time.Millisecond

// StartWatchdog begins starting the watchdog process in the background and
// returns at once, with env added to its environment (what it needs to log
// as the run does). The process is the small leasectl-watchdog program
// when it is installed beside self, leasectl's own binary, and else self
// re-executed (see watchdogProgram). Call it as early as possible, so that
// its start-up overlaps opening the store and acquiring the lease, and hand
// it to the Supervisor, whose Run stops it. A caller that may return before
// Run must Close it on the way out.
func StartWatchdog(self string, stderr io.Writer, env []string) *PendingWatchdog {
	return StartWatchdogWith(func() (Watchdog, error) {
		p, err := startProcessWatchdog(self, stderr, env)
		if err != nil {
			return nil, err // not a Watchdog holding a nil *processWatchdog
		}
		return p, nil
	})
}

// watchdogProgram is the program that runs a watchdog for leasectl's own
// binary self: the small leasectl-watchdog beside it (the release's
// archives and packages install both), which starts in a fraction of the
// time and memory; or, when it is not there (`go install`), self, whose
// hidden subcommand runs the same code.
func watchdogProgram(self string) string {
	small := filepath.Join(filepath.Dir(self), watchdog.Program)
	if fi, err := os.Stat(small); err == nil && fi.Mode().IsRegular() && unix.Access(small, unix.X_OK) == nil {
		return small
	}
	return self
}

// watchdogProcs gives every watchdog one P, whatever the supervisor's
// environment says: it runs one goroutine, and each P costs the Go runtime
// memory, on a many-core host hundreds of kilobytes.
const watchdogProcs = "GOMAXPROCS=1"

// startProcessWatchdog starts the watchdog program as the leader of a new
// process group (the terminal's Ctrl-C does not reach it before the child
// joins), its stderr shared with ours.
func startProcessWatchdog(self string, stderr io.Writer, env []string) (*processWatchdog, error) {
	program := watchdogProgram(self)
	p, err := startProgramWatchdog(program, stderr, env)
	if err != nil && program != self {
		// The small program is there but cannot start (a broken copy, a
		// mount that forbids executing it): leasectl's own binary can.
		p, err = startProgramWatchdog(self, stderr, env)
	}
	return p, err
}

// startProgramWatchdog starts program as the watchdog; see
// startProcessWatchdog.
func startProgramWatchdog(program string, stderr io.Writer, env []string) (*processWatchdog, error) {
	cmd := exec.Command(program, watchdog.Arg)
	cmd.Env = append(append(os.Environ(), watchdogProcs), env...)
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout = r, readyW
	err = cmd.Start()
	r.Close()
	readyW.Close()
	if err != nil {
		w.Close()
		readyR.Close()
		return nil, err
	}
	p := &processWatchdog{cmd: cmd, w: w, ready: make(chan struct{}), fired: make(chan struct{}), done: make(chan struct{})}
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer readyR.Close()
		sc := bufio.NewScanner(readyR)
		for sc.Scan() {
			switch sc.Text() + "\n" {
			case watchdog.ReadyLine:
				closeOnce(p.ready)
			case watchdog.FiredLine:
				closeOnce(p.fired)
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		// Its output ends with it: what it said is known before Done.
		<-read
		close(p.done)
	}()
	return p, nil
}

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

// Ready is closed once the watchdog ignores the signals forwarded to its
// group.
func (p *processWatchdog) Ready() <-chan struct{} { return p.ready }

// Fired is closed once the watchdog said it is killing the group because
// its deadline passed.
func (p *processWatchdog) Fired() <-chan struct{} { return p.fired }

// Done is closed once the watchdog process has exited, after Fired if it
// fired.
func (p *processWatchdog) Done() <-chan struct{} { return p.done }

// Group is the watchdog's process group, which the child must join.
func (p *processWatchdog) Group() int { return p.cmd.Process.Pid }

// SetDeadline moves the watchdog's deadline to left from now.
func (p *processWatchdog) SetDeadline(left time.Duration) error {
	return p.send(watchdog.DeadlineLine(watchdog.MonoNow() + int64(left)))
}

// Continue resumes the watchdog process, in case a stop reached it.
func (p *processWatchdog) Continue() error {
	return p.cmd.Process.Signal(syscall.SIGCONT)
}

// SetToken tells the watchdog the run's fencing token.
func (p *processWatchdog) SetToken(token int64) error {
	return p.send(watchdog.TokenLine(token))
}

func (p *processWatchdog) send(line string) error {
	if err := p.w.SetWriteDeadline(time.Now().Add(watchdogWriteTimeout)); err != nil {
		return err
	}
	_, err := io.WriteString(p.w, line)
	return err
}

// Close stops the watchdog once the run is over: the child's group is dead,
// so there is nothing left for it to guard. It is killed rather than asked
// to exit, because a watchdog still starting up would otherwise delay
// leasectl's exit by its whole start-up; it is reaped before Close returns.
func (p *processWatchdog) Close() error {
	err := p.cmd.Process.Kill()
	<-p.done
	p.w.Close()
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

var _ Watchdog = (*processWatchdog)(nil)
