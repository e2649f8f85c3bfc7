package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// The child program is this test binary re-executed by leasectl with
// childDirEnv set (see TestMain).
const (
	// childDirEnv names the folder where the child writes its record file.
	childDirEnv = "CHAOS_CHILD_DIR"
	// childRunEnv is how long the child runs: a Go duration, or empty for a
	// random time between minChildRun and maxChildRun.
	childRunEnv = "CHAOS_CHILD_RUN"
	// childAskedEnv is when the harness started the child's run, in
	// CLOCK_MONOTONIC ns: before the run asked for its lease, so before
	// its grant. The child copies it into its start record.
	childAskedEnv = "CHAOS_CHILD_ASKED"
	minChildRun   = 20 * time.Millisecond
	// maxChildRun is above the lease's TTL, so that a child whose supervisor
	// is frozen outlives the lease unless the watchdog kills it: without the
	// watchdog, the check sees the next holder overlap it.
	maxChildRun = 3 * time.Second
	// aliveEvery is how often a running child writes an alive record: the
	// resolution of the overlap check for a child killed without an end
	// record.
	aliveEvery = 2 * time.Millisecond
)

// Record kinds, one per line of a child's file: "<token> <kind> <ns>", and
// "<asked>" after them in the start record (childAskedEnv).
const (
	recStart = "start"
	recAlive = "alive"
	recEnd   = "end"
)

// monotonicNow is CLOCK_MONOTONIC in nanoseconds: one clock for every
// process on the host, unaffected by wall-clock steps.
func monotonicNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// runChild is the child's whole life: a start record, alive records every
// aliveEvery, and an end record; each record is one unbuffered write, so a
// SIGKILL loses nothing already recorded. It prints "started <pid>" on stdout
// once its start record is written, for the harness to find the holder.
func runChild() int {
	token, err := strconv.ParseInt(os.Getenv("LEASECTL_FENCING_TOKEN"), 10, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos child: bad LEASECTL_FENCING_TOKEN: %v\n", err)
		return 2
	}
	run, err := childRun(os.Getenv(childRunEnv))
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos child: %v\n", err)
		return 2
	}
	name := filepath.Join(os.Getenv(childDirEnv), fmt.Sprintf("%d-%d.rec", token, os.Getpid()))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos child: %v\n", err)
		return 2
	}
	defer f.Close()
	asked := os.Getenv(childAskedEnv)
	record := func(kind string) int64 {
		now := monotonicNow()
		line := fmt.Sprintf("%d %s %d", token, kind, now)
		if kind == recStart && asked != "" {
			line += " " + asked
		}
		if _, err := fmt.Fprintln(f, line); err != nil {
			fmt.Fprintf(os.Stderr, "chaos child: %v\n", err)
			os.Exit(2)
		}
		return now
	}
	end := record(recStart) + run.Nanoseconds()
	fmt.Printf("started %d\n", os.Getpid())
	for monotonicNow() < end {
		time.Sleep(aliveEvery)
		record(recAlive)
	}
	record(recEnd)
	return 0
}

// childRun parses childRunEnv's value.
func childRun(s string) (time.Duration, error) {
	if s == "" {
		return minChildRun + rand.N(maxChildRun-minChildRun), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad %s: %w", childRunEnv, err)
	}
	return d, nil
}
