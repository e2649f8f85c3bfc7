package testproc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// Freeze stops process pid with SIGSTOP and returns once the kernel shows it
// stopped. A signal takes effect only when the process next runs or leaves
// an uninterruptible sleep (an etcd fsync, a PostgreSQL write), so a test
// that freezes a server and at once expects silence would otherwise race
// with the server's last steps. A process that has already exited (a
// zombie) counts as stopped: it runs no more.
func Freeze(pid int) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		state, err := procState(pid)
		if err != nil {
			return err
		}
		if state == 'T' || state == 't' || state == 'Z' || state == 'X' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d not stopped 5s after SIGSTOP (state %c)", pid, state)
		}
		time.Sleep(time.Millisecond)
	}
}

// procState is the state letter of /proc/PID/stat: R, S, D, T (stopped),
// t (traced), Z...
func procState(pid int) (byte, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name in parentheses may hold spaces; the state follows
	// the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0, fmt.Errorf("process %d: unreadable stat %q", pid, stat)
	}
	return stat[i+2], nil
}
