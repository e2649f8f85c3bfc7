package filestore

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/leasectl/leasectl/internal/testenv"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// sleeper starts a process that sleeps until killed, in a process group
// of its own; it is killed and reaped when t ends.
func sleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// reapedPID is the PID of a process that has exited and been reaped: no
// process has it (until the PIDs wrap around).
func reapedPID(t *testing.T) int {
	t.Helper()
	cmd := sleeper(t)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return cmd.Process.Pid
}

// zombiePID is the PID of a process killed and not yet reaped.
func zombiePID(t *testing.T) int {
	t.Helper()
	cmd := sleeper(t)
	_ = cmd.Process.Kill()
	testenv.DeathTime(t, cmd.Process.Pid)
	return cmd.Process.Pid
}

// startOf is pid's start time.
func startOf(t *testing.T, pid int) uint64 {
	t.Helper()
	p, err := readProcess(strconv.Itoa(pid))
	if err != nil {
		t.Fatal(err)
	}
	return p.start
}

func TestEmbeddedTakesOverARunWhoseProcessesAreGone(t *testing.T) {
	host, err := currentHost()
	if err != nil {
		t.Skipf("no /proc of this PID namespace: %v", err)
	}
	// Each case gives the holder's supervisor (its PID and start time, as
	// noted) and the child's process group.
	tests := []struct {
		name       string
		supervisor func(t *testing.T) (int, uint64)
		group      func(t *testing.T) int
		edit       func(n *groupNote)
		gone       bool
		zombies    bool // proven by listing /proc, which must hide nothing
	}{
		{
			name:       "supervisor alive, group alive",
			supervisor: func(t *testing.T) (int, uint64) { p := sleeper(t).Process.Pid; return p, startOf(t, p) },
			group:      func(t *testing.T) int { return sleeper(t).Process.Pid },
		},
		{
			name:       "supervisor alive, group empty: its run is ending, its release on its way",
			supervisor: func(t *testing.T) (int, uint64) { p := sleeper(t).Process.Pid; return p, startOf(t, p) },
			group:      reapedPID,
		},
		{
			name:       "supervisor gone, group alive: the watchdog or a descendant runs on",
			supervisor: func(t *testing.T) (int, uint64) { return reapedPID(t), 1 },
			group:      func(t *testing.T) int { return sleeper(t).Process.Pid },
		},
		{
			name:       "supervisor gone, group empty",
			supervisor: func(t *testing.T) (int, uint64) { return reapedPID(t), 1 },
			group:      reapedPID,
			gone:       true,
		},
		{
			name:       "supervisor a zombie, group of zombies not yet reaped",
			supervisor: func(t *testing.T) (int, uint64) { p := zombiePID(t); return p, startOf(t, p) },
			group:      zombiePID,
			gone:       true,
			zombies:    true,
		},
		{
			name:       "supervisor's PID taken by another process, group empty",
			supervisor: func(t *testing.T) (int, uint64) { p := sleeper(t).Process.Pid; return p, startOf(t, p) + 1 },
			group:      reapedPID,
			gone:       true,
		},
		{
			name:       "note of an earlier run",
			supervisor: func(t *testing.T) (int, uint64) { return reapedPID(t), 1 },
			group:      reapedPID,
			edit:       func(n *groupNote) { n.token-- },
		},
		{
			name:       "note from another PID namespace",
			supervisor: func(t *testing.T) (int, uint64) { return reapedPID(t), 1 },
			group:      reapedPID,
			edit:       func(n *groupNote) { n.host.pidNS = "pid:[1]" },
		},
		{
			name:       "note from another boot",
			supervisor: func(t *testing.T) (int, uint64) { return reapedPID(t), 1 },
			group:      reapedPID,
			edit:       func(n *groupNote) { n.host.boot = "00000000-0000-0000-0000-000000000000" },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.zombies && procHidesProcesses() {
				t.Skip("/proc hides processes (hidepid): zombies cannot be told from hidden processes")
			}
			e := openEmbedded(t, t.TempDir())
			pid, start := tc.supervisor(t)
			req := storetest.Request("job", "holder", storetest.LongTTL)
			req.PID = pid
			held := storetest.Acquire(t, e, req)
			n := groupNote{token: held.Token, host: host, pid: pid, start: start, pgid: tc.group(t)}
			if tc.edit != nil {
				tc.edit(&n)
			}
			path := e.groupPath(jobKey("job"), 0)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(n.String()), 0o600); err != nil {
				t.Fatal(err)
			}

			st := storetest.Status(t, e, "job")
			l, err := e.Acquire(storetest.Ctx(t), storetest.Request("job", "next", storetest.LongTTL))
			var he *leasestore.HeldError
			switch {
			case !tc.gone && !errors.As(err, &he):
				t.Fatalf("Acquire = %v, %v; want held: the holder's processes are not proven gone", l, err)
			case !tc.gone && st.State != leasestore.StateRunning:
				t.Errorf("status %s, want RUNNING", st.State)
			case tc.gone && err != nil:
				t.Fatalf("Acquire: %v; want granted at once: the holder's processes are gone", err)
			case tc.gone && (l.Recovered == nil || l.Recovered.Holder != "holder" || l.Recovered.Crashes != 1):
				t.Errorf("Recovered = %+v, want the holder's crash, counted once", l.Recovered)
			case tc.gone && (st.State != leasestore.StateCrashed || st.Crashed == nil || st.Crashed.PID != pid):
				t.Errorf("status %s, crashed %+v; want CRASHED, the holder's pid %d", st.State, st.Crashed, pid)
			}
		})
	}
}

func TestEmbeddedNoteGroupIsReadBack(t *testing.T) {
	if _, err := currentHost(); err != nil {
		t.Skipf("no /proc of this PID namespace: %v", err)
	}
	e := openEmbedded(t, t.TempDir())
	l := storetest.Acquire(t, e, storetest.Request("job", "a", storetest.LongTTL))
	if err := e.NoteGroup(l, 4242); err != nil {
		t.Fatalf("NoteGroup: %v", err)
	}
	b, err := os.ReadFile(e.groupPath(jobKey("job"), 0))
	if err != nil {
		t.Fatal(err)
	}
	n, ok := parseGroupNote(string(b))
	if self, _ := selfProcess(); !ok || n.token != l.Token || n.pid != os.Getpid() || n.start != self.start || n.host != self.host || n.pgid != 4242 {
		t.Errorf("note %q read as %+v (%v), want this process's, token %d, group 4242", b, n, ok, l.Token)
	}
	if _, ok := parseGroupNote(string(b[:len(b)-3])); ok {
		t.Errorf("a note cut short is read as one")
	}
}
