package watchdog

import (
	"syscall"
	"unsafe"
)

// MonoNow reads CLOCK_MONOTONIC in nanoseconds, the clock of the deadlines.
func MonoNow() int64 {
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return ts.Nano()
}

const clockMonotonic = 1 // CLOCK_MONOTONIC, on every Linux architecture

// pollIn waits up to timeout milliseconds (forever if negative) for fd to
// be readable, or to reach its end, with ppoll(2), which every Linux
// architecture has.
func pollIn(fd, timeout int) (bool, error) {
	pfd := struct { // struct pollfd
		fd      int32
		events  int16
		revents int16
	}{fd: int32(fd), events: 0x1} // POLLIN
	var ts *syscall.Timespec
	if timeout >= 0 {
		t := syscall.NsecToTimespec(int64(timeout) * 1e6)
		ts = &t
	}
	n, _, e := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(ts)), 0, 0, 0)
	if e != 0 {
		return false, e
	}
	return n > 0, nil
}
