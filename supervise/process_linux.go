package supervise

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

func childAttr(foreground bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Setpgid:    true,
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

// KillOrphans SIGKILLs and reaps every child of this process except those in
// keep (the watchdog), repeating while killing them reparents their own
// children here.
func KillOrphans(keep ...int) {
	self := os.Getpid()
	for range 16 {
		pids := childrenOf(self, keep)
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

// childrenOf lists the processes whose parent is ppid, from /proc.
func childrenOf(ppid int, keep []int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == ppid || slices.Contains(keep, pid) {
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
