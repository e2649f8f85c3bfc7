//go:build !linux

package pgtest

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// procAttr has nothing to add outside Linux, which alone has a parent-death
// signal.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{}
}

// childrenOf lists the processes whose parent is pid, from ps(1).
func childrenOf(pid int) []int {
	out, err := exec.Command("ps", "-A", "-o", "pid=,ppid=").Output()
	if err != nil {
		return nil
	}
	var kids []int
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[1] == strconv.Itoa(pid) {
			if n, err := strconv.Atoi(f[0]); err == nil {
				kids = append(kids, n)
			}
		}
	}
	return kids
}
