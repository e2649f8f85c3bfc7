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
// (CGO_ENABLED=0) as the release does, and returns its path. The binary lives
// in a temporary folder removed by Cleanup.
func Leasectl() (string, error) {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "leasectl-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "leasectl")
		cmd := exec.Command("go", "build", "-o", buildPath, ".")
		cmd.Dir = moduleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	return buildPath, buildErr
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
