//go:build unix

// Command leasectl-watchdog is the watchdog process of a leasectl run
// (package internal/watchdog), as a program of its own: it costs a run a
// fraction of the memory and start-up of leasectl re-executing itself,
// which leasectl does when this program is not installed beside it.
package main

import (
	"syscall"

	"github.com/leasectl/leasectl/internal/watchdog"
)

func main() {
	syscall.Exit(watchdog.Main())
}
