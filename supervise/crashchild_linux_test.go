package supervise_test

import (
	"os"
	"runtime/debug"
	"unsafe"

	"golang.org/x/sys/unix"
)

// crashEnv, in the environment of this test binary run as a child, makes it
// die as a crashing program does instead of running tests: "segv" of a real
// segmentation fault, "abort" of the Go runtime's abort on a fatal panic
// (SIGABRT, as GOTRACEBACK=crash gives). Nobody sends either signal.
const crashEnv = "LEASECTL_TEST_CRASH"

// crashIfAsked dies as crashEnv says, if it is set.
func crashIfAsked() {
	switch os.Getenv(crashEnv) {
	case "segv":
		// The runtime turns a fault into a panic; with the kernel's
		// default action back, the fault kills the process as it would
		// a C program. An all-zero struct sigaction is SIG_DFL.
		var dfl [4]uint64
		if _, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(unix.SIGSEGV), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0); errno != 0 {
			os.Exit(3)
		}
		var p *int
		*p = 1
	case "abort":
		debug.SetTraceback("crash")
		panic("crashing as asked")
	}
}
