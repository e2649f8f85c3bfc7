package supervise

import (
	"errors"
	"sync"

	"golang.org/x/sys/unix"
)

// WatchExit watches process pid of this host through a pidfd: the channel
// is closed when it exits; stop ends the watch. A process already gone
// gives a channel already closed; one that cannot be watched gives a nil
// channel, which never fires: the caller then waits as it would without.
// stop may be called more than once.
func WatchExit(pid int) (exited <-chan struct{}, stop func()) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		gone := make(chan struct{})
		close(gone)
		return gone, func() {}
	}
	if err != nil {
		return nil, func() {}
	}
	// A pipe whose write end stop closes wakes the poll when the watch
	// is no longer wanted.
	var cancel [2]int
	if err := unix.Pipe2(cancel[:], unix.O_CLOEXEC); err != nil {
		unix.Close(fd)
		return nil, func() {}
	}
	done := make(chan struct{})
	go func() {
		defer unix.Close(fd)
		defer unix.Close(cancel[0])
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(cancel[0]), Events: unix.POLLIN}}
		for {
			_, err := unix.Poll(fds, -1)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err == nil && fds[0].Revents != 0 {
				close(done)
			}
			return
		}
	}()
	var once sync.Once
	return done, func() { once.Do(func() { unix.Close(cancel[1]) }) }
}
