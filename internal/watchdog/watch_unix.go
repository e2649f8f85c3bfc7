//go:build unix

package watchdog

import (
	"errors"
	"strconv"
	"syscall"
	"time"
)

// The watchdog's standard streams.
const (
	stdin  = 0
	stdout = 1
	stderr = 2
)

// Main is the watchdog process: it reads the supervisor's lines on its
// stdin, answers on its stdout and says its last word on its stderr. It
// returns an exit code only when it cannot do its job: 2 when it was not
// started as the leader of a process group (run by hand, killing its group
// could kill the caller's shell), 1 when it failed to kill its group.
func Main() int {
	if syscall.Getpgrp() != syscall.Getpid() {
		_ = write(stderr, "leasectl: watchdog: leasectl run starts it, as the leader of its child's process group; it is not a command\n")
		return 2
	}
	if err := watch(stdin, stdout, lastWordFromEnv()); err != nil {
		_ = write(stderr, "leasectl: watchdog: killing its process group failed: "+err.Error()+"\n")
		return 1
	}
	return 0
}

// watch is the watchdog's loop, reading the protocol from in (a pipe) and
// saying it is ready on out; it returns only if it failed to kill its
// group.
//
// It waits for lines and for the deadline in one poll(2) of in, with no
// goroutine in between, so that when the deadline passes it knows whether a
// newer one is waiting to be read: poll answers that the pipe is readable
// at once, however late this process got the CPU. The deadline is kept to
// the millisecond poll(2) counts in, rounded up.
func watch(in, out int, lw lastWord) error {
	if err := ignoreSignals(); err != nil {
		return killOwnGroup(lw, "it cannot ignore the signals forwarded to the group: "+err.Error())
	}
	if write(out, ReadyLine) != nil {
		return killOwnGroup(lw, "the supervisor vanished before the watchdog was ready")
	}
	deadline := int64(-1) // none yet: wait for the first
	var pending []byte
	buf := make([]byte, 4096)
	for {
		timeout := -1
		if deadline >= 0 {
			timeout = int(max(0, (deadline-MonoNow()+int64(time.Millisecond)-1)/int64(time.Millisecond)))
		}
		readable, err := pollIn(in, timeout)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return killOwnGroup(lw, "waiting for the supervisor failed: "+err.Error())
		}
		if !readable {
			if MonoNow() < deadline {
				continue
			}
			// Nothing newer is waiting: the deadline stands.
			_ = write(out, FiredLine)
			return killOwnGroup(lw, "the safety deadline passed without a renewal")
		}
		m, err := syscall.Read(in, buf)
		if errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.EAGAIN) {
			continue
		}
		if m <= 0 {
			return killOwnGroup(lw, "the supervisor vanished")
		}
		pending = append(pending, buf[:m]...)
		pending = readLines(pending, &deadline, &lw)
	}
}

// readLines acts on every whole line of pending and returns what is left
// of it, the start of a line still on its way.
func readLines(pending []byte, deadline *int64, lw *lastWord) []byte {
	for {
		end := -1
		for i, c := range pending {
			if c == '\n' {
				end = i
				break
			}
		}
		if end < 0 {
			return pending
		}
		line := string(pending[:end])
		pending = pending[end+1:]
		if len(line) < 2 || line[1] != ' ' {
			continue
		}
		v, err := strconv.ParseInt(line[2:], 10, 64)
		if err != nil {
			continue
		}
		switch line[0] {
		case 'D':
			*deadline = v
		case 'T':
			lw.token, lw.tokend = v, true
		}
	}
}

// killOwnGroup SIGKILLs the watchdog's process group, after saying why:
// the child and its descendants, and the watchdog itself.
func killOwnGroup(lw lastWord, why string) error {
	_ = write(stderr, string(lw.line("watchdog: killing the child's process group: "+why, syscall.Getpgrp(), time.Now())))
	return syscall.Kill(0, syscall.SIGKILL)
}

// write writes all of s to fd.
func write(fd int, s string) error {
	for s != "" {
		n, err := syscall.Write(fd, []byte(s))
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		s = s[n:]
	}
	return nil
}
