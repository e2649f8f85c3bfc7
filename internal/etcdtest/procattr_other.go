//go:build !linux

package etcdtest

import "syscall"

// procAttr has nothing to add outside Linux, which lacks Pdeathsig.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{}
}
