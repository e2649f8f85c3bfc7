//go:build unix && !linux

package supervise

import (
	"os"
	"syscall"
)

// childAttr has no parent-death signal outside Linux; the watchdog alone
// kills the group when the supervisor vanishes.
func childAttr(foreground bool, pgid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pgid: pgid, Foreground: foreground}
}

// BecomeSubreaper does nothing outside Linux: descendants that leave the
// group cannot be tracked there.
func BecomeSubreaper() error { return nil }

// KillOrphans does nothing outside Linux.
func KillOrphans() {}

// notifyStops returns nil outside Linux: the child's stops are not
// followed there (its siginfo layout is not read).
func notifyStops() <-chan os.Signal { return nil }

// followStops does nothing outside Linux.
func followStops(int, <-chan os.Signal, chan<- syscall.Signal, <-chan struct{}) {}
