// Package signame names signals as the shell and the kernel's headers do
// ("SIGTERM"), for messages and logs.
package signame

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// Name is sig's name, such as "SIGTERM"; "" for a number that names no
// signal.
func Name(sig syscall.Signal) string { return unix.SignalName(sig) }
