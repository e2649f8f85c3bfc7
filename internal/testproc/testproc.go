// Package testproc holds what the packages that start test servers
// (redistest, pgtest, etcdtest) and the bench share: free loopback ports
// that are never a standard server port, the start of a server process
// logging to a file and the wait until it is ready, and the end of a log
// for an error message. It is imported only by tests and the bench.
package testproc

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
)

// standardPorts are the ports of the servers the tests start (etcd, PostgreSQL,
// Redis, PgBouncer, Sentinel), which the machine's own servers may hold: a
// test server never takes one, even when the kernel's ephemeral range was
// widened to include it.
var standardPorts = []int{2379, 2380, 5432, 6379, 6432, 26379}

// FreePorts asks the kernel for n distinct free loopback ports, holding each
// until all are chosen. They are released before the server binds them;
// another process could take one in between, and the server's start-up then
// fails with a clear error.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		if port := l.Addr().(*net.TCPAddr).Port; !slices.Contains(standardPorts, port) {
			ports = append(ports, port)
		}
	}
	return ports, nil
}

// FreePort is one of FreePorts.
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// Tail returns the last lines of the log at path, joined on one line, for
// an error message.
func Tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	return LastLines(string(b))
}

// LastLines returns the last five lines of a log or a command's output,
// joined on one line, for an error message.
func LastLines(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}
