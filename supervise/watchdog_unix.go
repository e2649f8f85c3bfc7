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

// The watchdog protocol: the supervisor writes lines to the watchdog's
// stdin. Deadlines are absolute CLOCK_MONOTONIC nanoseconds, a clock both
// processes share, so the watchdog's deadline is exactly the supervisor's.
//
//	G <pgid>      the process group to kill
//	D <mono-ns>   the new deadline
//
// End of input means the supervisor died: the watchdog kills the group at
// once. When the run ends cleanly, the supervisor kills the watchdog.

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
	cmd *exec.Cmd
	w   *os.File
}

// watchdogWriteTimeout bounds a write to the watchdog, so a stopped watchdog
// whose pipe filled up cannot block the supervisor's loop.
const watchdogWriteTimeout = 10 * time.Millisecond

// StartWatchdog starts `self __watchdog` in its own process group (so the
// terminal's Ctrl-C does not reach it), its stderr shared with ours.
func StartWatchdog(self string, stderr io.Writer) (*ProcessWatchdog, error) {
	cmd := exec.Command(self, WatchdogArg)
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdin = r
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, err
	}
	return &ProcessWatchdog{cmd: cmd, w: w}, nil
}


// SetGroup tells the watchdog which group to kill.
func (p *ProcessWatchdog) SetGroup(pgid int) error {
	return p.send(fmt.Sprintf("G %d\n", pgid))
}

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
	_ = p.cmd.Wait()
	p.w.Close()
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// RunWatchdog is the watchdog process's main loop, reading the protocol from
// in. It returns after killing the group.
func RunWatchdog(in io.Reader, stderr io.Writer) error {
	// The operator's signals are for the supervisor and the child; the
	// watchdog must outlive a supervisor that dies of them.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	pgid := 0
	var deadline int64 // 0: none yet
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	kill := func(why string) error {
		if pgid == 0 {
			return nil
		}
		err := unix.Kill(-pgid, syscall.SIGKILL)
		fmt.Fprintf(stderr, "leasectl watchdog: killed process group %d: %s\n", pgid, why)
		if err == unix.ESRCH {
			return nil
		}
		return err
	}
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return kill("the supervisor vanished")
			}
			op, arg, _ := strings.Cut(line, " ")
			n, _ := strconv.ParseInt(arg, 10, 64)
			switch op {
			case "G":
				pgid = int(n)
				if deadline != 0 && monoNow() >= deadline {
					return kill("the safety deadline passed without a renewal")
				}
			case "D":
				deadline = n
				timer.Reset(time.Duration(deadline - monoNow()))
			}
		case <-timer.C:
			if now := monoNow(); now < deadline {
				timer.Reset(time.Duration(deadline - now))
				continue
			}
			if pgid == 0 {
				// The child never started; nothing to kill, but stay until the
				// supervisor says the run is over or vanishes.
				continue
			}
			return kill("the safety deadline passed without a renewal")
		}
	}
}

var _ Watchdog = (*ProcessWatchdog)(nil)
