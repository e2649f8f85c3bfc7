// Package watchdog is the watchdog process of a leasectl run: a separate
// process that holds only the run's safety deadline and SIGKILLs the child's
// process group when it passes without a renewal, or when the supervisor
// vanishes. It is the whole of the small leasectl-watchdog program, and
// leasectl runs the same code when that program is not installed beside it
// (`leasectl __watchdog`).
//
// It leads the process group the child joins, so it knows the group it
// guards from its first instruction, before the child exists: a supervisor
// killed right after starting the child cannot leave the group unguarded.
// The supervisor writes lines to the watchdog's stdin:
//
//	D <mono-ns>   the deadline, in CLOCK_MONOTONIC nanoseconds, a clock both
//	              processes share, so the watchdog's deadline is exactly the
//	              supervisor's
//	T <token>     the run's fencing token, for the watchdog's last word
//
// Once it ignores the signals forwarded to the group, the watchdog writes
// "R" on its stdout. When the deadline passes without a new one, or stdin
// ends because the supervisor died, it SIGKILLs its whole group, itself
// included; at the deadline it first writes "K", so that the supervisor can
// tell its own watchdog's kill from anyone else's. A deadline already
// written when the old one passes is read before the watchdog acts: a
// starved watchdog (a saturated machine, SIGSTOP) does not kill on a
// deadline the supervisor had already moved. When the run ends cleanly, the
// supervisor kills it.
//
// Every run pays for this process while its child runs, so the package
// imports nothing beyond the runtime's own neighbours (syscall, time,
// strconv, x/sys/unix): its program stays within 2 MB of resident memory.
// It does not guarantee anything once the supervisor and the watchdog are
// both frozen past the deadline.
package watchdog
