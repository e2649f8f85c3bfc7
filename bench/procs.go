//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// eventTimeout bounds every wait for a process's event, so a broken run
// fails the bench instead of hanging it.
const eventTimeout = 20 * time.Second

// waitingLog is what `leasectl run --wait` logs at debug level once it found
// the lease held and started waiting.
const waitingLog = "lease held; waiting"

// proc is a started command whose output is watched: the stamp helper's
// "ready PID" on stdout, leasectl's waiting log line on stderr.
type proc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser // nil unless started with a stdin pipe
	ready   chan int       // the child's pid, once
	waiting chan struct{}  // closed when leasectl logs that it waits
	out     sync.WaitGroup // the output readers
}

// startProc starts cmd, with a stdin pipe when hold is set (the stamp
// helper in hold mode ends when it closes).
func startProc(cmd *exec.Cmd, hold bool) (*proc, error) {
	p := &proc{cmd: cmd, ready: make(chan int, 1), waiting: make(chan struct{})}
	var err error
	if hold {
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", cmd.Args[0], err)
	}
	p.out.Add(2)
	go func() {
		defer p.out.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if s, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				if pid, err := strconv.Atoi(s); err == nil {
					p.ready <- pid
				}
			}
		}
	}()
	go func() {
		defer p.out.Done()
		sc := bufio.NewScanner(stderr)
		seen := false
		for sc.Scan() {
			if !seen && strings.Contains(sc.Text(), waitingLog) {
				seen = true
				close(p.waiting)
			}
		}
	}()
	return p, nil
}

// childPID waits for the stamp helper's "ready PID".
func (p *proc) childPID() (int, error) {
	select {
	case pid := <-p.ready:
		return pid, nil
	case <-time.After(eventTimeout):
		return 0, fmt.Errorf("%s: the child never said it was ready", strings.Join(p.cmd.Args, " "))
	}
}

// awaitWaiting waits for leasectl's log line saying it waits for the lease.
func (p *proc) awaitWaiting() error {
	select {
	case <-p.waiting:
		return nil
	case <-time.After(eventTimeout):
		return fmt.Errorf("%s never logged %q", strings.Join(p.cmd.Args, " "), waitingLog)
	}
}

// release closes the stamp helper's stdin: it stamps and exits.
func (p *proc) release() {
	if p.stdin != nil {
		p.stdin.Close()
	}
}

// wait waits for the output to close and the process to exit; it returns
// the exit code (-1 if killed by a signal).
func (p *proc) wait() (int, error) {
	done := make(chan struct{})
	go func() {
		p.out.Wait()
		p.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
		return p.cmd.ProcessState.ExitCode(), nil
	case <-time.After(eventTimeout):
		p.cmd.Process.Kill()
		<-done
		return -1, fmt.Errorf("%s did not exit", strings.Join(p.cmd.Args, " "))
	}
}

// waitOK waits and wants exit code 0.
func (p *proc) waitOK() error {
	code, err := p.wait()
	if err == nil && code != 0 {
		err = fmt.Errorf("%s exited %d", strings.Join(p.cmd.Args, " "), code)
	}
	return err
}

// readStamp reads a timestamp the stamp helper wrote.
func readStamp(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading a stamp: %w", err)
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// awaitBlockedInFlock waits until pid sleeps in the kernel's file-lock
// wait: the only sign a blocking flock(1) gives that it waits. It polls
// /proc, since the kernel offers no event for it.
func awaitBlockedInFlock(pid int) error {
	deadline := time.Now().Add(eventTimeout)
	for time.Now().Before(deadline) {
		wchan, err := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
		if err != nil {
			return fmt.Errorf("reading wchan of flock: %w", err)
		}
		if strings.Contains(string(wchan), "lock") {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return errors.New("flock never blocked on the lock")
}

// vmHWM is the peak resident set of pid from /proc/PID/status, in MB.
func vmHWM(pid int) (float64, error) { return statusMB(pid, "VmHWM") }

// statusMB is the field of /proc/PID/status given in kB, in MB.
func statusMB(pid int, field string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the status of %d: %w", pid, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("bad %s %q", field, v)
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no %s for %d", field, pid)
}

// childrenOf lists pid's children from /proc (every thread's).
func childrenOf(pid int) []int {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var kids []int
	for _, t := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				kids = append(kids, n)
			}
		}
	}
	return kids
}
