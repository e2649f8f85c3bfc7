package watchdog

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// asMain, in the environment of this test binary run as a child, makes it
// run Main instead of the tests.
const asMain = "LEASECTL_WATCHDOG_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) != "" {
		os.Exit(Main())
	}
	os.Exit(m.Run())
}

// Run by hand, not as a group leader, the watchdog would kill its caller's
// group: it refuses. sh leads the group here, so that a watchdog that did
// not refuse kills only sh and itself.
func TestMainRefusesToRunOutsideAGroupOfItsOwn(t *testing.T) {
	cmd := exec.Command("sh", "-c", `"$0" `+Arg+`; echo "code=$?"`, os.Args[0])
	cmd.Env = append(os.Environ(), asMain+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sh: %v; output %q: the watchdog killed the group it does not lead", err, out)
	}
	if s := string(out); !strings.Contains(s, "it is not a command") || !strings.HasSuffix(s, "code=2\n") {
		t.Errorf("output %q, want the refusal and exit code 2", s)
	}
}
