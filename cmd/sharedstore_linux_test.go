package cmd

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/leasectl/leasectl/internal/testenv"
)

// Two users of one host and their team's group: numeric IDs nobody has,
// so that no account needs to exist.
const (
	teamGID = 4242
	aliceID = 4301
	bobID   = 4302
)

// asUser runs the built binary with args as uid (0: root, as the test),
// in group teamGID, under the strictest umask, with the store folder store,
// and returns what it printed and its exit status.
func asUser(t *testing.T, uid int, store string, args ...string) binaryResult {
	t.Helper()
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	// The binary's folder is the test's: let the other users reach it.
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", append([]string{"-c", `umask 077; exec "$0" "$@"`, bin}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=/", "LEASECTL_STORE=file://" + store}
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: teamGID}}
	}
	res := runArgv(t, cmd)
	t.Logf("uid %d: %v → %d; stderr: %s", uid, args, res.code, strings.TrimSpace(res.stderr))
	return res
}

// storeFolder makes a store folder, owned by root and group teamGID with
// mode, in a folder every user may reach.
func storeFolder(t *testing.T, mode os.FileMode) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("running leasectl as two other users needs root")
	}
	parent := t.TempDir()
	for _, d := range []string{filepath.Dir(parent), parent} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(parent, "leasectl")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 0, teamGID); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestEmbeddedStoreSharedThroughAGroup(t *testing.T) {
	// The team's store folder, setgid and group-writable: root runs the
	// job first, then each user of the group, waiting for it too (which
	// makes the notify files), whatever their umask.
	store := storeFolder(t, 0o770|os.ModeSetgid)
	for _, step := range []struct {
		uid  int
		args []string
	}{
		{0, []string{"run", "--job", "nightly", "--", "true"}},
		{aliceID, []string{"run", "--job", "nightly", "--", "true"}},
		{bobID, []string{"run", "--job", "nightly", "--wait", "--", "true"}},
		{aliceID, []string{"run", "--job", "other", "--wait", "--", "true"}},
		{bobID, []string{"run", "--job", "other", "--", "true"}},
		{bobID, []string{"status", "nightly"}},
		{aliceID, []string{"scan"}},
	} {
		if res := asUser(t, step.uid, store, step.args...); res.code != 0 {
			t.Fatalf("uid %d: %v exit %d, want 0: %s", step.uid, step.args, res.code, res.stderr)
		}
	}
}

func TestSharedStoreTakeoverFromAnotherUsersKilledRun(t *testing.T) {
	// Root's run is SIGKILLed; a user of the group takes the job over at
	// once (--ttl 30m), proving root's processes gone without the right to
	// signal them.
	store := storeFolder(t, 0o770|os.ModeSetgid)
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	holder := exec.Command(bin, "run", "--job", "nightly", "--ttl", "30m", "--", "sh", "-c", "echo started; exec sleep 1000")
	holder.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=/", "LEASECTL_STORE=file://" + store}
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = holder.Process.Kill()
		_ = holder.Wait()
	})
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("holder said %q, %v; want started", line, err)
	}
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testenv.DeathTime(t, holder.Process.Pid)
	if res := asUser(t, aliceID, store, "run", "--job", "nightly", "--", "true"); res.code != 0 {
		t.Fatalf("alice's run after root's was killed: exit %d, want 0 at once: %s", res.code, res.stderr)
	}
}

func TestEmbeddedStoreNotSharedSaysWhatToChange(t *testing.T) {
	// The case: a store folder that is not group-writable, where
	// root ran the job first. Another user's run is refused with one line
	// naming the file, its owner and what to change.
	store := storeFolder(t, 0o755)
	if res := asUser(t, 0, store, "run", "--job", "nightly", "--", "true"); res.code != 0 {
		t.Fatalf("root's run: exit %d: %s", res.code, res.stderr)
	}
	res := asUser(t, aliceID, store, "run", "--job", "nightly", "--", "true")
	line := strings.TrimSpace(res.stderr)
	for _, want := range []string{"leasectl.store", "belongs to user root", "uid 4301", "not group-writable", "chgrp -R GROUP " + store, "chmod g+s " + store, "--store"} {
		if !strings.Contains(line, want) {
			t.Errorf("refusal %q does not say %q", line, want)
		}
	}
	if res.code != 69 || strings.Contains(line, "\n") {
		t.Errorf("exit %d, %d lines; want 69, one line", res.code, strings.Count(line, "\n")+1)
	}
}

func TestSystemAccountWithoutHomeIsToldWhereTheStoreCanBe(t *testing.T) {
	home := filepath.Join(t.TempDir(), "nonexistent")
	res := leasectlBinary(t, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}, "run", "--job", "nightly", "--", "true")
	line := strings.TrimSpace(res.stderr)
	if res.code != 69 || strings.Contains(line, "\n") || !strings.Contains(line, "XDG_STATE_HOME") || !strings.Contains(line, "--store") || !strings.Contains(line, home) {
		t.Errorf("exit %d, stderr %q; want 69 and one line naming HOME, XDG_STATE_HOME and --store", res.code, line)
	}
	if _, err := os.Stat(home); err == nil {
		t.Errorf("%s was created", home)
	}
}
