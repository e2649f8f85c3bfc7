//go:build !linux

package redistest

import "syscall"

// procAttr has nothing to add outside Linux, which lacks Pdeathsig.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{}
}
