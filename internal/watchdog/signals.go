//go:build unix

package watchdog

import "syscall"

// forwarded are the signals the watchdog ignores: the operator's, which the
// supervisor forwards to the group, are for the child, and the watchdog must
// outlive a supervisor that dies of them; a Ctrl-Z must not stop it with
// the child; a write to a supervisor gone must not kill it before it kills
// the group.
var forwarded = []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
	syscall.SIGPIPE, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU}
