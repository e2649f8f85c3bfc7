package supervise

import (
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

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

// notifyStops returns a channel that receives SIGCHLD, which the kernel
// sends when a child stops. (No signal.Stop: the process ends with its run.)
func notifyStops() <-chan os.Signal {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGCHLD)
	return c
}

// followStops sends on stopped the signal that stops child pid, each time
// job control stops it, until exited is closed. It learns of stops from
// SIGCHLD and asks waitid for stops only (WSTOPPED without WEXITED), which
// reports each stop once and leaves the child's exit to cmd.Wait.
func followStops(pid int, sigchld <-chan os.Signal, stopped chan<- syscall.Signal, exited <-chan struct{}) {
	for {
		for {
			sig, ok := stopSignal(pid)
			if !ok {
				break
			}
			if jobControl(sig) {
				select {
				case stopped <- sig:
				case <-exited:
					return
				}
			}
		}
		select {
		case <-sigchld:
		case <-exited:
			return
		}
	}
}

// sifieldsOffset is where the union of a siginfo_t begins: after three
// ints, aligned to a pointer (the kernel's struct siginfo). For SIGCHLD it
// holds si_pid, si_uid, si_status.
const sifieldsOffset = (12 + unsafe.Sizeof(uintptr(0)) - 1) &^ (unsafe.Sizeof(uintptr(0)) - 1)

// cldStopped is si_code CLD_STOPPED: the child was stopped by a signal.
const cldStopped = 5

// stopSignal reports the signal that stopped child pid since the last
// report, if it stopped. x/sys/unix leaves siginfo_t's SIGCHLD fields
// opaque, so they are read at the kernel's offsets.
func stopSignal(pid int) (syscall.Signal, bool) {
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WNOHANG, nil); err != nil {
		return 0, false
	}
	base := unsafe.Pointer(&info)
	chldPid := *(*int32)(unsafe.Add(base, sifieldsOffset))
	status := *(*int32)(unsafe.Add(base, sifieldsOffset+8))
	if int(chldPid) != pid || info.Code != cldStopped {
		return 0, false
	}
	return syscall.Signal(status), true
}
