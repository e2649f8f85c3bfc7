package cmd

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/testenv"
)

// fullDisk is a small tmpfs mounted in a mount namespace of its own, so
// that the test can fill it without touching the machine's disks, and
// leasectl runs that see it.
type fullDisk struct {
	dir    string // where leasectl sees it
	fromUs string // the same folder, as this process reaches it
	ns     string // the namespace, for nsenter
}

// mountSmallDisk mounts a tmpfs of 256 KiB, seen only by the processes
// run through d.argv. It skips the test where mount namespaces cannot be
// made (not root, no unshare).
func mountSmallDisk(t *testing.T) *fullDisk {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small file system needs root")
	}
	for _, tool := range []string{"unshare", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s(1) is not installed", tool)
		}
	}
	dir := t.TempDir()
	// The namespace lives as long as its first process: a shell that
	// mounts the tmpfs, says so, and waits for its stdin to close.
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs -o size=256k leasectl-test "$1" && echo mounted && exec cat >/dev/null`, "sh", dir)
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	holder.Stderr = &stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = holder.Wait()
	})
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "mounted\n" {
		_ = holder.Wait()
		t.Skipf("cannot mount a tmpfs in a mount namespace here: %s", strings.TrimSpace(stderr.String()))
	}
	pid := strconv.Itoa(holder.Process.Pid)
	return &fullDisk{dir: dir, fromUs: filepath.Join("/proc", pid, "root", dir), ns: filepath.Join("/proc", pid, "ns", "mnt")}
}

// free removes the file that filled the disk.
func (d *fullDisk) free(t *testing.T) {
	t.Helper()
	if err := os.Remove(filepath.Join(d.fromUs, "fill")); err != nil {
		t.Fatal(err)
	}
}

// leasectl runs the built binary in the disk's namespace.
func (d *fullDisk) leasectl(t *testing.T, env []string, args ...string) binaryResult {
	t.Helper()
	leasectl, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	return runCommand(t, env, append([]string{"nsenter", "--mount=" + d.ns, "--", leasectl}, args...))
}

// lastLine is the last line s holds.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// TestEmbeddedStoreOnAFullDisk fills the embedded store's file system for
// real (issue 11, item 6): a run whose release cannot be written says the
// disk is full and keeps its outcome in the outbox, which the next run
// delivers once there is space again, leaving no crash; a run that cannot
// even write its grant exits 69 saying the disk is full, starts nothing,
// and the job works again once space is freed.
func TestEmbeddedStoreOnAFullDisk(t *testing.T) {
	disk := mountSmallDisk(t)
	env := userEnv(t) // the state folder, so the outbox, is on another disk
	store := "file://" + filepath.Join(disk.dir, "store")
	storeFiles := filepath.Join(disk.dir, "store", "leasectl.store", "jobs") + "/"

	// A new job's release writes its record's second slot, at 4 KiB: a
	// page the full tmpfs cannot give.
	filler := `head -c 1048576 /dev/zero > "$1/fill" 2>/dev/null; exit 0`
	r := disk.leasectl(t, env, "run", "--store", store, "--job", "fresh", "--", "sh", "-c", filler, "sh", disk.dir)
	if r.code != 0 {
		t.Fatalf("run exit %d, want the child's 0; stderr:\n%s", r.code, r.stderr)
	}
	last := lastLine(r.stderr)
	for _, want := range []string{"disk full writing embedded store file " + storeFiles, "outbox"} {
		if !strings.Contains(last, want) {
			t.Errorf("the run's last line does not say %q:\n%s", want, last)
		}
	}
	if strings.Contains(r.stderr, "deadline exceeded") {
		t.Errorf("the run blamed a deadline, not the disk:\n%s", r.stderr)
	}

	marker := filepath.Join(t.TempDir(), "started")
	r = disk.leasectl(t, env, "run", "--store", store, "--job", "new", "--", "touch", marker)
	if r.code != 69 {
		t.Fatalf("run on a full disk: exit %d, want 69; stderr:\n%s", r.code, r.stderr)
	}
	// Before it, a line may say that the outbox could not be delivered yet.
	if last := lastLine(r.stderr); !strings.Contains(last, "disk full writing embedded store file "+storeFiles) {
		t.Errorf("the last line of a run on a full disk does not name the disk and the store file:\n%s", last)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the child started although the grant could not be written")
	}

	disk.free(t)
	// The next run on the host delivers the outbox.
	if r := disk.leasectl(t, env, "run", "--store", store, "--job", "new", "--", "touch", marker); r.code != 0 {
		t.Fatalf("run once space was freed: exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the child did not run once space was freed: %v", err)
	}
	r = disk.leasectl(t, env, "status", "--store", store, "fresh")
	if r.code != 0 {
		t.Fatalf("status exit %d; stderr:\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"last_result\tCOMPLETED", "crashes\t0"} {
		if !strings.Contains(r.stdout, want+"\n") {
			t.Errorf("status of the run whose release met the full disk lacks %q:\n%s", want, r.stdout)
		}
	}
}
