//go:build unix

package supervise

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The watchdog leads the process group the child joins, so it knows the
// group it guards from its first instruction, before the child exists: a
// supervisor killed right after starting the child cannot leave the group
// unguarded. The supervisor writes lines to the watchdog's stdin:
//
//	D <mono-ns>   the deadline, in CLOCK_MONOTONIC nanoseconds, a clock both
//	              processes share, so the watchdog's deadline is exactly the
//	              supervisor's
//
// Once it ignores the signals forwarded to the group, the watchdog writes
// "R" on its stdout. When the deadline passes without a new one, or stdin
// ends because the supervisor died, it SIGKILLs its whole group, itself
// included. When the run ends cleanly, the supervisor kills it.

// WatchdogArg is the hidden subcommand that runs the watchdog.
const WatchdogArg = "__watchdog"

// monoNow reads CLOCK_MONOTONIC in nanoseconds.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// ProcessWatchdog is the supervisor's end of a watchdog process.
type ProcessWatchdog struct {
	cmd   *exec.Cmd
	w     *os.File
	ready chan struct{} // closed when the watchdog said it is ready
	done  chan struct{} // closed once the process was reaped
}

// watchdogWriteTimeout bounds a write to the watchdog, so a stopped watchdog
// whose pipe filled up cannot block the supervisor's loop.
const watchdogWriteTimeout = 10 * time.Millisecond

// StartWatchdog starts `self __watchdog` as the leader of a new process
// group (the terminal's Ctrl-C does not reach it before the child joins),
// its stderr shared with ours.
func StartWatchdog(self string, stderr io.Writer) (*ProcessWatchdog, error) {
	cmd := exec.Command(self, WatchdogArg)
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
	p := &ProcessWatchdog{cmd: cmd, w: w, ready: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer readyR.Close()
		var b [2]byte
		if n, _ := io.ReadFull(readyR, b[:]); n == 2 && string(b[:]) == readyLine {
			close(p.ready)
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// readyLine is what the watchdog writes once it ignores forwarded signals.
const readyLine = "R\n"

// Ready is closed once the watchdog ignores the signals forwarded to its
// group.
func (p *ProcessWatchdog) Ready() <-chan struct{} { return p.ready }

// Done is closed once the watchdog process has exited.
func (p *ProcessWatchdog) Done() <-chan struct{} { return p.done }

// Group is the watchdog's process group, which the child must join.
func (p *ProcessWatchdog) Group() int { return p.cmd.Process.Pid }

// SetDeadline moves the watchdog's deadline to left from now.
func (p *ProcessWatchdog) SetDeadline(left time.Duration) error {
	return p.send(fmt.Sprintf("D %d\n", monoNow()+int64(left)))
}

func (p *ProcessWatchdog) send(line string) error {
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
func (p *ProcessWatchdog) Close() error {
	err := p.cmd.Process.Kill()
	<-p.done
	p.w.Close()
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// RunWatchdog is the watchdog process's main loop, reading the protocol from
// in and saying it is ready on out. It returns only if it failed to kill its
// group.
func RunWatchdog(in io.Reader, out, stderr io.Writer) error {
	// The operator's signals, forwarded to the group, are for the child; the
	// watchdog must outlive a supervisor that dies of them, and must not be
	// stopped with a child that is (Ctrl-Z).
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
		syscall.SIGPIPE, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	if _, err := io.WriteString(out, readyLine); err != nil {
		return killOwnGroup(stderr, "the supervisor vanished before the watchdog was ready")
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var deadline int64
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return killOwnGroup(stderr, "the supervisor vanished")
			}
			if op, arg, _ := strings.Cut(line, " "); op == "D" {
				deadline, _ = strconv.ParseInt(arg, 10, 64)
				timer.Reset(time.Duration(deadline - monoNow()))
			}
		case <-timer.C:
			if now := monoNow(); now < deadline {
				timer.Reset(time.Duration(deadline - now))
				continue
			}
			return killOwnGroup(stderr, "the safety deadline passed without a renewal")
		}
	}
}

// killOwnGroup SIGKILLs the watchdog's process group: the child and its
// descendants, and the watchdog itself.
func killOwnGroup(stderr io.Writer, why string) error {
	fmt.Fprintf(stderr, "leasectl watchdog: killing process group %d: %s\n", unix.Getpgrp(), why)
	return unix.Kill(0, syscall.SIGKILL)
}

var _ Watchdog = (*ProcessWatchdog)(nil)
