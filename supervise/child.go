package supervise

import (
	"fmt"
	"syscall"
)

// Child is the supervised command's process group.
type Child interface {
	// PID is the direct child's process ID.
	PID() int
	// Signal sends sig to the whole process group.
	Signal(sig syscall.Signal) error
	// SignalProcess sends sig to the direct child only.
	SignalProcess(sig syscall.Signal) error
	// Done delivers the child's exit status once, when the direct child has
	// exited (other members of its group may still be alive).
	Done() <-chan Exit
	// Stopped delivers the signal each time job control stops the direct
	// child: SIGTSTP (Ctrl-Z), SIGTTIN or SIGTTOU (the terminal used from
	// the background). A stop by SIGSTOP is no job control and is not
	// delivered.
	Stopped() <-chan syscall.Signal
	// Continue resumes the group after a stop: it gives the group the
	// terminal first if the child had it and the supervisor's own group
	// has it now (`fg`, not `bg`), then sends SIGCONT.
	Continue() error
}

// jobControl reports whether sig is a stop that job control sends.
func jobControl(sig syscall.Signal) bool {
	return sig == syscall.SIGTSTP || sig == syscall.SIGTTIN || sig == syscall.SIGTTOU
}

// Exit is how the direct child ended.
type Exit struct {
	Code   int            // exit code; -1 when it died of a signal
	Signal syscall.Signal // the signal it died of; 0 when it exited
}

// ExitCode is the shell's view of e: the code, or 128+N for signal N.
func (e Exit) ExitCode() int {
	if e.Signal != 0 {
		return 128 + int(e.Signal)
	}
	return e.Code
}

// String reads "exit N" or "signal N (name)".
func (e Exit) String() string {
	if e.Signal != 0 {
		return fmt.Sprintf("signal %d (%s)", int(e.Signal), e.Signal)
	}
	return fmt.Sprintf("exit %d", e.Code)
}

// StartError means the command could not be started at all; Code is 127 when
// it was not found and 126 when it is not executable, as in a shell.
type StartError struct {
	Code int
	// Command is the command as given (its argv[0]).
	Command string
	// Why says what a shell would: "command not found", "permission
	// denied", "is a directory", "bad interpreter"; empty when unknown.
	Why string
	Err error
}

// Error says it as a shell would: "CMD: command not found", "CMD:
// permission denied"; the cause's own message when nothing more is known.
func (e *StartError) Error() string {
	switch {
	case e.Command != "" && e.Why != "":
		return e.Command + ": " + e.Why
	case e.Command != "":
		return e.Command + ": " + e.Err.Error()
	default:
		return e.Err.Error()
	}
}

// Unwrap returns the cause.
func (e *StartError) Unwrap() error { return e.Err }
