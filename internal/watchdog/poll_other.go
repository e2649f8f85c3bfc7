//go:build unix && !linux

package watchdog

import "golang.org/x/sys/unix"

// MonoNow reads CLOCK_MONOTONIC in nanoseconds, the clock of the deadlines.
func MonoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// pollIn waits up to timeout milliseconds (forever if negative) for fd to
// be readable, or to reach its end.
func pollIn(fd, timeout int) (bool, error) {
	n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, timeout)
	return n > 0, err
}
