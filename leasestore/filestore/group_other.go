//go:build !linux

package filestore

import (
	"errors"
	"time"
)

// procHost is what PIDs are relative to; outside Linux nothing is known.
type procHost struct{ boot, pidNS string }

// process is a process's identity; outside Linux it cannot be read.
type process struct {
	host  procHost
	start uint64
}

// selfProcess fails outside Linux, where /proc cannot prove a run gone:
// its lease is left to expire.
func selfProcess() (process, error) {
	return process{}, errors.New("proving a run's processes gone needs Linux's /proc")
}

// gone proves nothing outside Linux.
func gone(groupNote, time.Duration) bool { return false }
