// Package initbudget keeps leasectl's package init within a recorded
// budget. Every leasectl process pays the init of every package linked in,
// and so does the watchdog when `leasectl run` re-executes its own binary
// for want of leasectl-watchdog beside it: a store driver or a library that builds tables at init makes every run
// slower. Its test, run by `make test`, builds the real binary, runs
// `GODEBUG=inittrace=1 leasectl version` many times, takes per package the
// least clock time seen (noise on a busy machine only ever adds time), and
// compares the sum with testdata/initbudget.txt.
//
// Least times still follow the machine: a 2-core machine shared with other
// work runs every init a third slower for tens of seconds at a time, and a
// CI machine may be slower than the one that recorded the file. So the
// measured times are first brought to the recorded machine's speed:
// divided by the Slowdown, how much slower the standard library's packages
// (whose code no change to leasectl can touch) ran than recorded.
//
// The test fails when the total exceeds the recorded one by more than
// Slack, naming the packages that grew most, or when a package missing from
// the file takes more than Slack on its own. When the growth is intended,
// refresh the file and commit it with a message that says why:
//
//	go test ./internal/initbudget -update
//
// What it guarantees: a change that adds more than Slack of package init
// does not pass unnoticed, and neither a loaded machine (other tests running
// in parallel) nor a slower one makes it fail: when the first runs are over
// budget it measures again with more runs before it fails.
//
// What it does not guarantee: that a new Go release, whose standard library
// may init more or less, leaves the budget right; the failure names the
// toolchain the file was recorded with, and the file is refreshed when Go
// is upgraded. It measures package init only, not the runtime's own
// start-up, the size of the binary or what main does before the command
// runs (`make bench` times all of it as leasectl_version_vs_empty_go).
package initbudget
