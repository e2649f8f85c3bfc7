package testproc

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Launch starts cmd, a test server, with its output appended to the log at
// logPath, and returns a channel closed once the server has exited and been
// waited for.
func Launch(cmd *exec.Cmd, logPath string) (<-chan struct{}, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	return done, nil
}

// WaitReady asks probe, every interval, whether a server that Launch
// started is ready, until it is (probe returns nil), the server exits (done
// is closed) or timeout passes. what names the server in the errors.
func WaitReady(what string, done <-chan struct{}, timeout, interval time.Duration, probe func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		if Exited(done) {
			return fmt.Errorf("%s exited during start-up", what)
		}
		err := probe()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %v", what, timeout, err)
		}
		select {
		case <-done:
		case <-time.After(interval):
		}
	}
}

// Stop ends a server whose end done tells, unless it has exited already:
// it resumes the server were it frozen, sends it sig, and SIGKILLs it if it
// has not exited after timeout.
func Stop(p *os.Process, done <-chan struct{}, sig os.Signal, timeout time.Duration) {
	if Exited(done) {
		return
	}
	p.Signal(syscall.SIGCONT)
	p.Signal(sig)
	select {
	case <-done:
	case <-time.After(timeout):
		p.Kill()
		<-done
	}
}

// Exited reports whether the server whose end done tells has exited.
func Exited(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}
