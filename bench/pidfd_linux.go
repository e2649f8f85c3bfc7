package main

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// mono is CLOCK_MONOTONIC in nanoseconds, the clock the stamp helper writes.
func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// pidfd is a process's pidfd: its exit can be awaited as an event, and a
// pid reused meanwhile is not mistaken for it.
type pidfd int

// openPidfd opens pid's pidfd.
func openPidfd(pid int) (pidfd, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return 0, fmt.Errorf("pidfd_open: %w", err)
	}
	return pidfd(fd), nil
}

// Close closes the pidfd.
func (p pidfd) Close() error { return unix.Close(int(p)) }

// awaitDeath waits for the process to exit (an event, not polling) and
// returns the monotonic time it saw the exit.
func (p pidfd) awaitDeath() (int64, error) {
	fds := []unix.PollFd{{Fd: int32(p), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(eventTimeout/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("poll pidfd: %w", err)
		}
		if n == 0 {
			return 0, fmt.Errorf("process still alive after %s", eventTimeout)
		}
		return mono(), nil
	}
}
