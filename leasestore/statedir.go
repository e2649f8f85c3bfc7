package leasestore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// StateDir is the folder where leasectl keeps its state on this host: the
// embedded store by default, the outbox, the notes of silent endpoints.
// It is $XDG_STATE_HOME/leasectl, or ~/.local/state/leasectl when
// XDG_STATE_HOME is unset or not absolute. A home that does not exist (a
// system account's) is an *UnavailableError naming both ways to choose a
// folder.
func StateDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "leasectl"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", &UnavailableError{Op: "open", Err: fmt.Errorf("cannot find the embedded store's folder: set XDG_STATE_HOME or HOME, or name a store with --store: %w", err)}
	}
	if _, err := os.Stat(home); errors.Is(err, fs.ErrNotExist) {
		return "", &UnavailableError{Op: "open", Err: fmt.Errorf("the embedded store's folder would be under HOME (%s), which does not exist: set XDG_STATE_HOME to a folder this user may write, or name a store with --store (e.g. file:///var/lib/leasectl)", home)}
	}
	return filepath.Join(home, ".local", "state", "leasectl"), nil
}
