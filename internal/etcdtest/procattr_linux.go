package etcdtest

import "syscall"

// procAttr makes the kernel SIGKILL the server if the test process dies
// without stopping it (a test binary killed by its -timeout), so no
// etcd outlives its tests.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
