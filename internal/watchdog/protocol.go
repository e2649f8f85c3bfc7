package watchdog

import "strconv"

// Arg is the argument that starts a watchdog, of the small program as of
// leasectl's fallback; ps shows it, and tests find the watchdog by it.
const Arg = "__watchdog"

// Program is the file name of the small watchdog program, which leasectl
// runs from beside its own binary when it is there.
const Program = "leasectl-watchdog"

// What the watchdog writes on its stdout: ReadyLine once it ignores
// forwarded signals, FiredLine just before it kills the group at the
// deadline.
const (
	ReadyLine = "R\n"
	FiredLine = "K\n"
)

// DeadlineLine tells the watchdog its deadline, at mono CLOCK_MONOTONIC
// nanoseconds (MonoNow).
func DeadlineLine(mono int64) string { return "D " + strconv.FormatInt(mono, 10) + "\n" }

// TokenLine tells the watchdog the run's fencing token.
func TokenLine(token int64) string { return "T " + strconv.FormatInt(token, 10) + "\n" }
