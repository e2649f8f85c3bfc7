//go:build unix

package supervise

import (
	"bufio"
	"bytes"
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

	"github.com/rs/zerolog"
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
//	T <token>     the run's fencing token, for the watchdog's last word
//
// Once it ignores the signals forwarded to the group, the watchdog writes
// "R" on its stdout. When the deadline passes without a new one, or stdin
// ends because the supervisor died, it SIGKILLs its whole group, itself
// included; at the deadline it first writes "K", so that the supervisor can
// tell its own watchdog's kill from anyone else's. A deadline already
// written when the old one passes is read before the watchdog acts: a
// starved watchdog (a saturated machine, SIGSTOP) does not kill on a
// deadline the supervisor had already moved. When the run ends cleanly,
// the supervisor kills it.

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

// StartWatchdog begins starting the watchdog process, `self __watchdog`,
// in the background and returns at once, with env added to its
// environment (what it needs to log as the run does). Call it as early as
// possible, so that its start-up overlaps opening the store and acquiring
// the lease, and hand it to the Supervisor, whose Run stops it. A caller
// that may return before Run must Close it on the way out.
func StartWatchdog(self string, stderr io.Writer, env []string) *PendingWatchdog {
	return StartWatchdogWith(func() (Watchdog, error) {
		p, err := startProcessWatchdog(self, stderr, env)
		if err != nil {
			return nil, err // not a Watchdog holding a nil *processWatchdog
		}
		return p, nil
	})
}

// startProcessWatchdog starts `self __watchdog` as the leader of a new
// process group (the terminal's Ctrl-C does not reach it before the child
// joins), its stderr shared with ours.
func startProcessWatchdog(self string, stderr io.Writer, env []string) (*processWatchdog, error) {
	cmd := exec.Command(self, WatchdogArg)
	cmd.Env = append(os.Environ(), env...)
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
			case readyLine:
				closeOnce(p.ready)
			case firedLine:
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

// What the watchdog writes on its stdout: readyLine once it ignores
// forwarded signals, firedLine just before it kills the group at the
// deadline.
const (
	readyLine = "R\n"
	firedLine = "K\n"
)

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
	return p.send(fmt.Sprintf("D %d\n", monoNow()+int64(left)))
}

// Continue resumes the watchdog process, in case a stop reached it.
func (p *processWatchdog) Continue() error {
	return p.cmd.Process.Signal(syscall.SIGCONT)
}

// SetToken tells the watchdog the run's fencing token.
func (p *processWatchdog) SetToken(token int64) error {
	return p.send(fmt.Sprintf("T %d\n", token))
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

// RunWatchdog is the watchdog process's main loop, reading the protocol from
// in (its stdin, a pipe) and saying it is ready on out; log gets its last
// word, in the run's format, with the run's token once known. It returns
// only if it failed to kill its group.
//
// It waits for lines and for the deadline in one poll(2) of in, with no
// goroutine in between, so that when the deadline passes it knows whether a
// newer one is waiting to be read: poll answers that the pipe is readable
// at once, however late this process got the CPU. The deadline is kept to
// the millisecond poll(2) counts in, rounded up.
func RunWatchdog(in io.Reader, out io.Writer, log zerolog.Logger) error {
	// The operator's signals, forwarded to the group, are for the child; the
	// watchdog must outlive a supervisor that dies of them, and must not be
	// stopped with a child that is (Ctrl-Z).
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
		syscall.SIGPIPE, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	f, ok := in.(*os.File)
	if !ok {
		return fmt.Errorf("the watchdog reads its deadlines from a pipe, not a %T", in)
	}
	if _, err := io.WriteString(out, readyLine); err != nil {
		return killOwnGroup(log, "the supervisor vanished before the watchdog was ready")
	}
	fd := int(f.Fd())
	deadline := int64(-1) // none yet: wait for the first
	var pending []byte
	buf := make([]byte, 4096)
	for {
		timeout := -1
		if deadline >= 0 {
			timeout = int(max(0, (deadline-monoNow()+int64(time.Millisecond)-1)/int64(time.Millisecond)))
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, timeout)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return killOwnGroup(log, fmt.Sprintf("waiting for the supervisor failed: %v", err))
		}
		if n == 0 {
			if monoNow() < deadline {
				continue
			}
			// Nothing newer is waiting: the deadline stands.
			_, _ = io.WriteString(out, firedLine)
			return killOwnGroup(log, "the safety deadline passed without a renewal")
		}
		m, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if m <= 0 {
			return killOwnGroup(log, "the supervisor vanished")
		}
		pending = append(pending, buf[:m]...)
		for {
			line, rest, ok := bytes.Cut(pending, []byte{'\n'})
			if !ok {
				break
			}
			pending = rest
			switch op, arg, _ := strings.Cut(string(line), " "); op {
			case "D":
				deadline, _ = strconv.ParseInt(arg, 10, 64)
			case "T":
				if token, err := strconv.ParseInt(arg, 10, 64); err == nil {
					log = log.With().Int64("token", token).Logger()
				}
			}
		}
	}
}

// killOwnGroup SIGKILLs the watchdog's process group: the child and its
// descendants, and the watchdog itself.
func killOwnGroup(log zerolog.Logger, why string) error {
	log.Error().Int("pgid", unix.Getpgrp()).Msgf("watchdog: killing the child's process group: %s", why)
	return unix.Kill(0, syscall.SIGKILL)
}

var _ Watchdog = (*processWatchdog)(nil)
