package cmd

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/testenv"
)

// binaryHangGuard only catches a hung leasectl; it is no timing assertion.
const binaryHangGuard = 30 * time.Second

// binaryResult is what one run of the built binary left.
type binaryResult struct {
	stdout, stderr string
	code           int
}

// userEnv is the environment of a user with nothing of leasectl's set: a
// home and state folder of the test's own and the PATH of the test process.
func userEnv(t *testing.T) []string {
	t.Helper()
	home := t.TempDir()
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_STATE_HOME=" + filepath.Join(home, "state"), "USER=tester"}
}

// leasectlBinary runs the built binary as a user would, with env (see
// userEnv) and args, and returns what it printed and its exit status.
func leasectlBinary(t *testing.T, env []string, args ...string) binaryResult {
	t.Helper()
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	return runCommand(t, env, append([]string{bin}, args...))
}

// runCommand runs argv with env, and returns what it printed and its exit
// status; a run that outlasts binaryHangGuard fails the test.
func runCommand(t *testing.T, env []string, argv []string) binaryResult {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	return runArgv(t, cmd)
}

// runArgv runs cmd, and returns what it printed and its exit status; a run
// that outlasts binaryHangGuard fails the test.
func runArgv(t *testing.T, cmd *exec.Cmd) binaryResult {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(binaryHangGuard):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%q hung; stderr so far: %s", cmd.Args, errOut.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return binaryResult{stdout: out.String(), stderr: errOut.String(), code: cmd.ProcessState.ExitCode()}
}

// writeFile writes text to path with mode.
func writeFile(t *testing.T, path, text string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}
