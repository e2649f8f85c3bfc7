// Package testenv builds the leasectl binary for tests that drive it as a
// user would, and runs it for them: to completion (Run), or in the
// background while the test watches what its child reports and what it
// logs (Start). It is imported only by tests.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Leasectl builds the leasectl binary once per test process, statically
// (CGO_ENABLED=0) as the release does, with the small leasectl-watchdog
// beside it as the release installs it, and returns its path. The binaries
// live in a temporary folder removed by Cleanup.
func Leasectl() (string, error) {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "leasectl-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "leasectl")
		if buildErr = build(buildPath, "."); buildErr == nil {
			buildErr = build(filepath.Join(dir, "leasectl-watchdog"), "./cmd/leasectl-watchdog")
		}
	})
	return buildPath, buildErr
}

// Alone returns the path of a copy of the leasectl binary with nothing
// beside it, as `go install` leaves it: its runs' watchdog is leasectl
// re-executing itself. It lives in a folder of the test's own.
func Alone(t testing.TB) string {
	t.Helper()
	bin, err := Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	alone := filepath.Join(t.TempDir(), "leasectl")
	if err := os.Link(bin, alone); err != nil {
		t.Fatal(err)
	}
	return alone
}

// build compiles the package pkg of the module to out, statically.
func build(out, pkg string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = moduleRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// Command is a command running the binary Leasectl builds with args,
// failing t when it cannot be built.
func Command(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	bin, err := Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	return exec.Command(bin, args...)
}

// Cleanup removes the built binary; call it from TestMain after m.Run.
func Cleanup() {
	if buildPath != "" {
		os.RemoveAll(filepath.Dir(buildPath))
	}
}

// moduleRoot is the folder holding go.mod, found from this file's location.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}
