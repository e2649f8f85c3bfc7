package testproc

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

func TestFreePortsAreDistinctAndBindable(t *testing.T) {
	ports, err := FreePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] || slices.Contains(standardPorts, p) {
			t.Fatalf("port %d: repeated or a standard port (%v)", p, ports)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		l.Close()
	}
}

func TestTailKeepsTheLastFiveLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("1\n2\n3\n4\n5\n6\n7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := Tail(path), "3 | 4 | 5 | 6 | 7"; got != want {
		t.Errorf("Tail = %q, want %q", got, want)
	}
	if got := Tail(filepath.Join(t.TempDir(), "missing")); got != "(no log)" {
		t.Errorf("Tail of a missing log = %q", got)
	}
}

func TestFreezeReturnsOnceStopped(t *testing.T) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if err := Freeze(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	state, err := procState(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if state != 'T' {
		t.Fatalf("state after Freeze = %c, want T (stopped)", state)
	}
}
