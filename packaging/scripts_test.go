package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The install scripts serve dpkg and rpm, which call them with different
// arguments: dpkg with a word (configure OLD-VERSION, remove, upgrade NEW),
// rpm with the number of versions left installed. Each case is run with a
// systemctl stub that records its calls, and with the scripts' "is systemd
// running" folder pointed at a folder of the test's.
func TestInstallScriptsUnderDpkgAndRpm(t *testing.T) {
	const unit = "leasectl-reaper.service leasectl-registry.service"
	tests := []struct {
		name   string
		script string
		args   []string
		want   []string
	}{
		{"deb fresh install", "postinstall.sh", []string{"configure"}, []string{"daemon-reload"}},
		{"deb upgrade", "postinstall.sh", []string{"configure", "1.0.0"}, []string{"daemon-reload", "try-restart " + unit}},
		{"rpm fresh install", "postinstall.sh", []string{"1"}, []string{"daemon-reload"}},
		{"rpm upgrade", "postinstall.sh", []string{"2"}, []string{"daemon-reload", "try-restart " + unit}},
		{"deb remove", "preremove.sh", []string{"remove"}, []string{"stop " + unit, "disable " + unit}},
		{"deb upgrade, old prerm", "preremove.sh", []string{"upgrade", "2.0.0"}, nil},
		{"rpm erase", "preremove.sh", []string{"0"}, []string{"stop " + unit, "disable " + unit}},
		{"rpm upgrade, old preun", "preremove.sh", []string{"1"}, nil},
		{"deb purge", "postremove.sh", []string{"purge"}, []string{"daemon-reload"}},
		{"rpm erase, postun", "postremove.sh", []string{"0"}, []string{"daemon-reload"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := runScript(t, tt.script, true, tt.args...)
			if !slices.Equal(calls, tt.want) {
				t.Errorf("%s %q called systemctl %q, want %q", tt.script, tt.args, calls, tt.want)
			}
		})
	}
}

// Without a running systemd (a container, a chroot) the scripts must not
// start or stop anything, and must still succeed.
func TestInstallScriptsWithoutSystemd(t *testing.T) {
	for _, script := range []string{"postinstall.sh", "postremove.sh"} {
		if calls := runScript(t, script, false, "configure", "1.0.0"); len(calls) != 0 {
			t.Errorf("%s called systemctl %q without a running systemd", script, calls)
		}
	}
	calls := runScript(t, "preremove.sh", false, "remove")
	if want := []string{"disable leasectl-reaper.service leasectl-registry.service"}; !slices.Equal(calls, want) {
		t.Errorf("preremove.sh without a running systemd called systemctl %q, want only %q", calls, want)
	}
}

// runScript runs a packaging script with a recording systemctl first in PATH,
// with systemd running or not, and returns systemctl's calls. The script must
// exit 0: a failing maintainer script leaves a package half-installed.
func runScript(t *testing.T, script string, systemdRunning bool, args ...string) []string {
	t.Helper()
	dir := t.TempDir()
	body, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	const probe = "/run/systemd/system"
	if !strings.Contains(string(body), probe) {
		t.Fatalf("%s no longer checks %s for a running systemd; update this test", script, probe)
	}
	runDir := filepath.Join(dir, "run-systemd")
	if systemdRunning {
		if err := os.Mkdir(runDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	scriptPath := filepath.Join(dir, script)
	if err := os.WriteFile(scriptPath, []byte(strings.ReplaceAll(string(body), probe, runDir)), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "systemctl.log")
	stub := "#!/bin/sh\necho \"$*\" >> '" + log + "'\n"
	if err := os.WriteFile(filepath.Join(bin, "systemctl"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command("/bin/sh", append([]string{scriptPath}, args...)...)
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %q: %v\n%s", script, args, err, out)
	}
	raw, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(raw)), "\n")
}
