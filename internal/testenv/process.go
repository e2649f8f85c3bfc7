package testenv

import (
	"bufio"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is a leasectl process running in the background of a test: its
// child reports on stdout, one line per event, and leasectl logs on
// stderr, each line also written to the test's log.
type Process struct {
	// Cmd is the started command.
	Cmd *exec.Cmd

	t      testing.TB
	lines  chan string   // stdout; closed at its end
	logs   chan string   // stderr; a line nobody waits for is dropped
	done   chan struct{} // closed once leasectl exited and was reaped
	exited time.Time     // when it was reaped
}

// Start starts cmd, whose stdout and stderr it reads; the process is
// killed (and continued, were it stopped) when t ends.
func Start(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errOut, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Process{Cmd: cmd, t: t, lines: make(chan string, 64), logs: make(chan string, 256), done: make(chan struct{})}
	var logs sync.WaitGroup
	logs.Go(func() {
		sc := bufio.NewScanner(errOut)
		for sc.Scan() {
			t.Logf("leasectl[%d]: %s", cmd.Process.Pid, sc.Text())
			select {
			case p.logs <- sc.Text():
			default:
			}
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		logs.Wait()
		cmd.Wait()
		p.exited = time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Process.Signal(syscall.SIGCONT)
		// Lines nobody read any more are drained, so that the reader
		// reaches the end of stdout and the process is reaped.
		lines, timeout := p.lines, time.After(HangGuard)
		for {
			select {
			case _, ok := <-lines:
				if !ok {
					lines = nil
				}
			case <-p.done:
				return
			case <-timeout:
				t.Errorf("leasectl[%d] killed, yet its output is still open %s later (a child outside its group?)", cmd.Process.Pid, HangGuard)
				return
			}
		}
	})
	return p
}

// Lines are the child's stdout lines, closed when stdout ends.
func (p *Process) Lines() <-chan string { return p.lines }

// Done is closed once leasectl has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Expect waits for the child's next line, which must start with prefix,
// and returns the rest, trimmed, and when it was read.
func (p *Process) Expect(prefix string) (string, time.Time) {
	p.t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("output ended waiting for %q", prefix)
		}
		if !strings.HasPrefix(line, prefix) {
			p.t.Fatalf("child said %q, want %q", line, prefix)
		}
		return strings.TrimSpace(strings.TrimPrefix(line, prefix)), time.Now()
	case <-time.After(HangGuard):
		p.t.Fatalf("no %q from the child", prefix)
	}
	return "", time.Time{}
}

// ExpectLog waits for a log line of leasectl containing msg.
func (p *Process) ExpectLog(msg string) {
	p.t.Helper()
	timeout := time.After(HangGuard)
	for {
		select {
		case line := <-p.logs:
			if strings.Contains(line, msg) {
				return
			}
		case <-timeout:
			p.t.Fatalf("leasectl never logged %q", msg)
		}
	}
}

// Exit waits for leasectl to exit and returns its exit code and when it
// exited.
func (p *Process) Exit() (int, time.Time) {
	p.t.Helper()
	select {
	case <-p.done:
		return p.Cmd.ProcessState.ExitCode(), p.exited
	case <-time.After(HangGuard):
		p.t.Fatal("leasectl did not exit")
		return -1, time.Time{}
	}
}

// ExitCode waits for leasectl to exit and returns its exit code.
func (p *Process) ExitCode() int {
	p.t.Helper()
	code, _ := p.Exit()
	return code
}
