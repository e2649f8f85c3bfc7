package testenv

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// DeathTime waits for process pid to exit and returns when it did, through
// a pidfd: an event, not polling. It fails t when pid still runs after
// HangGuard.
func DeathTime(t testing.TB, pid int) time.Time {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return time.Now()
	}
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", pid, err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(HangGuard/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll pidfd: %v", err)
		}
		if n == 0 {
			t.Fatalf("process %d still alive after %s", pid, HangGuard)
		}
		return time.Now()
	}
}
