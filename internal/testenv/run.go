package testenv

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// HangGuard bounds every wait of a test on a leasectl process, only to
// catch hangs: the tests' timing assertions use bounds of their own.
const HangGuard = 30 * time.Second

// Run runs cmd to completion and returns its exit code and what it wrote on
// stdout and stderr that cmd did not send elsewhere. It fails t when cmd
// cannot start or is still running after HangGuard, and kills it then.
func Run(t testing.TB, cmd *exec.Cmd) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &errOut
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
	case <-time.After(HangGuard):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%v hung", cmd.Args)
	}
	t.Logf("%v → %d; stderr: %s", cmd.Args[1:], cmd.ProcessState.ExitCode(), strings.TrimSpace(errOut.String()))
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}
