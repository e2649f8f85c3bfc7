//go:build unix

package supervise

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Command starts the real child process.
type Command struct {
	Argv   []string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Foreground gives the child's group the terminal on stdin, so an
	// interactive child is not stopped by SIGTTIN.
	Foreground bool
	// Env is added to the child's environment, after the process's own and
	// before the lease's variables, each overriding what came before.
	Env []string
}

// Start starts the command with env added to the environment, in process
// group pgid, or in a new group it leads when pgid is 0. The goroutine that forks keeps its OS thread locked until the
// child exits, because the kernel delivers the parent-death signal when the
// forking thread ends, not the process.
func (c *Command) Start(env []string, pgid int) (Child, error) {
	path, err := exec.LookPath(c.Argv[0])
	if err != nil {
		return nil, lookPathError(c.Argv[0], err)
	}
	cmd := exec.Command(path)
	cmd.Args = c.Argv
	cmd.Env = append(append(os.Environ(), c.Env...), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, c.Stdout, c.Stderr
	cmd.SysProcAttr = childAttr(c.Foreground, pgid)

	started := make(chan error, 1)
	p := &proc{done: make(chan Exit, 1), stopped: make(chan syscall.Signal, 1), foreground: c.Foreground}
	exited := make(chan struct{})
	stops := notifyStops() // before the child exists, so that no stop goes unseen
	go func() {
		runtime.LockOSThread()
		// The thread stays locked for ever: when this goroutine returns the
		// thread exits, after the child is gone.
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.pid, p.pgid = cmd.Process.Pid, pgid
		if pgid == 0 {
			p.pgid = p.pid
		}
		if c.Foreground {
			// leasectl is now in the terminal's background: with `stty
			// tostop`, its log lines would stop it. Ignoring SIGTTOU only
			// after the fork leaves the child's disposition untouched.
			signal.Ignore(syscall.SIGTTOU)
		}
		started <- nil
		go followStops(p.pid, stops, p.stopped, exited)
		err := cmd.Wait()
		close(exited)
		if c.Foreground {
			reclaimTerminal(p.pgid)
		}
		p.done <- exitOf(cmd.ProcessState, err)
	}()
	if err := <-started; err != nil {
		return nil, startError(c.Argv[0], err)
	}
	return p, nil
}

type proc struct {
	pid, pgid  int
	done       chan Exit
	stopped    chan syscall.Signal
	foreground bool // the child's group was given the terminal
}

func (p *proc) PID() int                       { return p.pid }
func (p *proc) Done() <-chan Exit              { return p.done }
func (p *proc) Stopped() <-chan syscall.Signal { return p.stopped }

func (p *proc) Continue() error {
	if p.foreground {
		if fg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP); err == nil && fg == unix.Getpgrp() {
			_ = unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, p.pgid)
		}
	}
	return unix.Kill(-p.pgid, syscall.SIGCONT)
}

func (p *proc) Signal(sig syscall.Signal) error {
	return unix.Kill(-p.pgid, sig)
}

func (p *proc) SignalProcess(sig syscall.Signal) error {
	return unix.Kill(p.pid, sig)
}

func exitOf(st *os.ProcessState, err error) Exit {
	if st == nil {
		return Exit{Code: 1}
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return Exit{Code: -1, Signal: ws.Signal()}
	}
	return Exit{Code: st.ExitCode()}
}

// lookPathError says why name could not be found as a command, with the
// shell's code: 127 not found, 126 found but not runnable.
func lookPathError(name string, err error) *StartError {
	if st, serr := os.Stat(name); serr == nil && st.IsDir() && strings.ContainsRune(name, '/') {
		return &StartError{Code: 126, Command: name, Why: "is a directory", Err: err}
	}
	if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EACCES) {
		return &StartError{Code: 126, Command: name, Why: "permission denied", Err: err}
	}
	if strings.ContainsRune(name, '/') {
		return &StartError{Code: 127, Command: name, Why: "no such file or directory", Err: err}
	}
	return &StartError{Code: 127, Command: name, Why: "command not found", Err: err}
}

// startError turns an exec failure of a command LookPath found into the
// shell's code: it exists, so ENOENT means its #! interpreter does not.
func startError(name string, err error) *StartError {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return &StartError{Code: 126, Command: name, Why: "bad interpreter: the program its #! line names does not exist", Err: err}
	case errors.Is(err, syscall.EACCES):
		return &StartError{Code: 126, Command: name, Why: "permission denied", Err: err}
	case errors.Is(err, syscall.ENOEXEC):
		return &StartError{Code: 126, Command: name, Why: "cannot execute binary file: exec format error", Err: err}
	default:
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return &StartError{Code: 126, Command: name, Why: errno.Error(), Err: err}
		}
		return &StartError{Code: 126, Command: name, Err: err}
	}
}

// reclaimTerminal makes leasectl's own group the terminal's foreground again
// after an interactive child of group pgid ended, if that group still had
// it: not when the shell has it, leasectl having been stopped or put in the
// background. (SIGTTOU is ignored since the child started, so a background
// process could take it.)
func reclaimTerminal(pgid int) {
	if fg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP); err == nil && fg == pgid {
		_ = unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, unix.Getpgrp())
	}
}

// SuspendSelf stops this process's group with sig, as job control stopped
// the child, so that the shell that started leasectl sees its job stopped
// and takes the terminal back; `fg` or `bg` resumes it with SIGCONT. It
// returns at once: the stop happens as the signal is delivered. SIGTTOU,
// which leasectl ignores once an interactive child has the terminal, is
// sent as SIGTSTP.
func SuspendSelf(sig syscall.Signal) {
	if sig == syscall.SIGTTOU {
		sig = syscall.SIGTSTP
	}
	_ = unix.Kill(0, sig)
}
