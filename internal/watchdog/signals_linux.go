//go:build linux && !mips && !mipsle && !mips64 && !mips64le

package watchdog

import (
	"syscall"
	"unsafe"
)

// ignoreSignals sets the signals forwarded to the group to SIG_IGN with
// rt_sigaction(2) itself: os/signal would cost the watchdog a tenth of its
// memory. On these architectures the kernel's struct sigaction starts with
// the handler, and all else is zero for SIG_IGN; its signal set is 8 bytes,
// so the struct is four words on a 64-bit machine and five on a 32-bit one:
// five zeroed words cover both.
// Nothing in the watchdog asks the runtime for a signal, so the runtime
// never installs its handler back.
func ignoreSignals() error {
	for _, s := range forwarded {
		act := [5]uintptr{sigIgn}
		if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(s), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0); e != 0 {
			return e
		}
	}
	return nil
}

const sigIgn = 1 // SIG_IGN
