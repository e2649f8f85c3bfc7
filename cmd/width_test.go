package cmd

import (
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/charmbracelet/lipgloss"
)

// ansi matches the escape sequences that colour a terminal's text.
var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// TestTablesFitAnEightyColumnTerminal runs the on-call commands in an
// 80-column terminal over long job names, worker IDs and reasons: no line
// is wider than the terminal (so none wraps), the widest columns being
// truncated with "…".
func TestTablesFitAnEightyColumnTerminal(t *testing.T) {
	env := append(userEnv(t), "LEASECTL_STORE=file://"+filepath.Join(t.TempDir(), "store"))
	const (
		job    = "billing/export-invoices-to-the-data-warehouse-nightly"
		worker = "ip-10-0-12-34.eu-west-1.compute.internal:123456:deadbeef"
		reason = "the upstream billing API answers HTTP 500 to every request since the 02:00 deploy, see INC-123456"
	)
	holdJob(t, env, job, "--worker-id", worker)

	// A run whose supervisor vanished, for scan to find once its TTL ran out.
	const ttl = 300 * time.Millisecond
	crashed := holdJob(t, env, job+"-twin", "--worker-id", worker+"-twin", "--ttl", ttl.String())
	if err := crashed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl + 300*time.Millisecond) // its liveness runs out on the store's clock

	if res := leasectlBinary(t, env, "quarantine", "add", job+"-poison", "--reason", reason); res.code != 0 {
		t.Fatalf("quarantine add: %+v", res)
	}
	for _, args := range [][]string{
		{"ls"},
		{"status", job},
		{"quarantine", "list"},
		{"quarantine", "show", job + "-poison"},
		{"scan"},
	} {
		term := inTerminal(t, env, args...)
		if code := term.exit(); code != 0 {
			t.Errorf("%s: exit %d; the terminal showed %q", args, code, term.output())
		}
		out := ansi.ReplaceAllString(term.output(), "")
		if !strings.Contains(out, "…") {
			t.Errorf("%s: nothing was truncated:\n%s", args, out)
		}
		for _, l := range terminalLines(out) {
			if w := lipgloss.Width(l); w > 80 {
				t.Errorf("%s: a line %d columns wide wraps on an 80-column terminal: %q", args, w, l)
			}
		}
	}
}
