package supervise

import (
	"fmt"
	"syscall"
	"time"
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
	Err  error
}

// Error is the cause's message.
func (e *StartError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *StartError) Unwrap() error { return e.Err }

// Watchdog is the separate process that kills the child's group when the
// safety deadline passes without an update, or when the supervisor vanishes.
type Watchdog interface {
	// Group is the process group the watchdog leads and kills; the child
	// joins it.
	Group() int
	// SetDeadline moves the kill deadline; left is the time from now.
	SetDeadline(left time.Duration) error
	// Ready is closed once the watchdog ignores the signals forwarded to
	// the group; until then a forwarded signal would kill it.
	Ready() <-chan struct{}
	// Done is closed when the watchdog process has exited, for whatever
	// reason.
	Done() <-chan struct{}
	// Close stops the watchdog after the run ended and the group was killed.
	Close() error
}
