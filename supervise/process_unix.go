//go:build unix

package supervise

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
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
}

// Start starts the command with env added to the environment, in process
// group pgid, or in a new group it leads when pgid is 0. The goroutine that forks keeps its OS thread locked until the
// child exits, because the kernel delivers the parent-death signal when the
// forking thread ends, not the process.
func (c *Command) Start(env []string, pgid int) (Child, error) {
	path, err := exec.LookPath(c.Argv[0])
	if err != nil {
		code := 127
		if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EACCES) {
			code = 126
		}
		return nil, &StartError{Code: code, Err: err}
	}
	cmd := exec.Command(path)
	cmd.Args = c.Argv
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, c.Stdout, c.Stderr
	cmd.SysProcAttr = childAttr(c.Foreground, pgid)

	started := make(chan error, 1)
	p := &proc{done: make(chan Exit, 1)}
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
		err := cmd.Wait()
		if c.Foreground {
			reclaimTerminal()
		}
		p.done <- exitOf(cmd.ProcessState, err)
	}()
	if err := <-started; err != nil {
		return nil, startError(err)
	}
	return p, nil
}

type proc struct {
	pid, pgid int
	done      chan Exit
}

func (p *proc) PID() int          { return p.pid }
func (p *proc) Done() <-chan Exit { return p.done }

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

// startError turns an exec failure into the shell's codes.
func startError(err error) *StartError {
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, exec.ErrNotFound):
		return &StartError{Code: 127, Err: err}
	default:
		return &StartError{Code: 126, Err: err}
	}
}

// reclaimTerminal makes leasectl's own group the terminal's foreground again
// after an interactive child ended (SIGTTOU is ignored since the child
// started, so a background process may do this).
func reclaimTerminal() {
	_ = unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, unix.Getpgrp())
}
