//go:build unix && !linux

package supervise

import "syscall"

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
