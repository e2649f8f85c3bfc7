package supervise_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A child killed by SIGSEGV, reported at release, is notified, and so is
// the quarantine its crashes led to: run twice at --max-crashes 2 on the
// embedded store, then a reaper with a command sink gets three events,
// each once.
func TestCrashesReportedAtReleaseAreNotified(t *testing.T) {
	for i := 1; i <= 2; i++ {
		run := leasectl(t, nil, "run", "--job", "segv", "--max-crashes", "2", "--", "sh", "-c", "kill -SEGV $$")
		if code := exitCode(t, run); code != 128+int(syscall.SIGSEGV) {
			t.Fatalf("run %d: exit %d, want %d", i, code, 128+int(syscall.SIGSEGV))
		}
	}
	if st := jobStatus(t, "", "segv"); st["state"] != "QUARANTINED" || st["crashes"] != 2.0 {
		t.Fatalf("status after two crashes: %v, %v crashes; want QUARANTINED, 2", st["state"], st["crashes"])
	}
	events := filepath.Join(t.TempDir(), "events.jsonl")
	start(t, leasectl(t, nil, "scan", "--watch", "--interval", "100ms", "--notify-command", "cat >> "+events))
	var kinds []string
	for guard := time.Now().Add(hangGuard); len(kinds) < 3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(guard) {
			t.Fatalf("the reaper sent %v in %s, want two crashes and a quarantine", kinds, hangGuard)
		}
		raw, _ := os.ReadFile(events)
		kinds = nil
		for line := range strings.Lines(string(raw)) {
			if !strings.HasSuffix(line, "\n") {
				break // still being written
			}
			var e struct{ Kind, Text string }
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("event %q: %v", line, err)
			}
			kinds = append(kinds, e.Kind)
			if e.Kind == "crash" && !strings.Contains(e.Text, "killed by SIGSEGV") {
				t.Errorf("crash event %q, want how the child died", e.Text)
			}
		}
	}
	slices.Sort(kinds)
	if !slices.Equal(kinds, []string{"crash", "crash", "quarantined"}) {
		t.Errorf("the reaper sent %v, want two crashes and a quarantine, each once", kinds)
	}
}
