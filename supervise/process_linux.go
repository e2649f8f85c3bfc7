package supervise

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

func childAttr(foreground bool, pgid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Setpgid:    true,
		Pgid:       pgid,
		Foreground: foreground,
		Pdeathsig:  syscall.SIGKILL,
	}
}

// BecomeSubreaper makes this process the child subreaper of its descendants:
// those that daemonize out of the child's group are reparented here instead
// of to init, so KillOrphans can still find them.
func BecomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// KillOrphans SIGKILLs and reaps every child this process still has,
// repeating while killing them reparents their own children here. Call it
// once the child and the watchdog were reaped: any child left is a
// descendant that escaped the group. In the usual case there is none, which
// waitid tells without reading /proc.
func KillOrphans() {
	self := os.Getpid()
	for range 16 {
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); errors.Is(err, unix.ECHILD) {
			return
		}
		pids := childrenOf(self)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range pids {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, 0, nil)
		}
	}
}

// childrenOf finds ppid's children by reading every process's stat (the
// cheaper /proc/self/task/*/children needs CONFIG_PROC_CHILDREN, which
// kernels do not all have).
func childrenOf(ppid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == ppid {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses and may
		// contain spaces: state, ppid, ...
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) {
			pids = append(pids, pid)
		}
	}
	return pids
}
