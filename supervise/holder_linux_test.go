package supervise

import (
	"os/exec"
	"testing"
	"time"
)

func TestWatchExitFiresWhenTheProcessExits(t *testing.T) {
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited, stop := WatchExit(cmd.Process.Pid)
	defer stop()
	select {
	case <-exited:
		t.Fatal("fired while the process runs")
	default:
	}
	_ = cmd.Process.Kill()
	select {
	case <-exited:
	case <-time.After(hangGuard):
		t.Fatal("never fired after the process was killed")
	}
	_ = cmd.Wait()
	stop() // a second stop is harmless

	gone, stopGone := WatchExit(cmd.Process.Pid)
	defer stopGone()
	if !fired(gone) {
		t.Error("a process already reaped gives a channel not closed; want one closed, so the waiter knows it gone")
	}
}
