//go:build linux

// Command stamp is the benchmark's child: it writes a CLOCK_MONOTONIC
// timestamp in nanoseconds to a file, so that `make bench` can time a
// handoff from one child's end to the next child's start without counting
// anything but the processes in between.
//
//	stamp start FILE   write the time at start-up, exit 0
//	stamp hold FILE    print "ready PID", wait for stdin to close, then
//	                   write the time and exit 0
package main

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "stamp: %v\n", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: stamp start|hold FILE")
	}
	switch args[0] {
	case "start":
	case "hold":
		fmt.Printf("ready %d\n", os.Getpid())
		if _, err := io.Copy(io.Discard, os.Stdin); err != nil {
			return fmt.Errorf("reading stdin: %w", err)
		}
	default:
		return fmt.Errorf("unknown mode %q: want start or hold", args[0])
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return fmt.Errorf("reading the clock: %w", err)
	}
	return os.WriteFile(args[1], []byte(strconv.FormatInt(ts.Nano(), 10)), 0o600)
}
