package cmd

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// releaseRun runs the command tree with args and returns stdout, stderr and the
// exit code.
func releaseRun(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	f := &Factory{
		IO:      &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
		Globals: &GlobalOptions{},
		Now:     time.Now,
	}
	root := NewCmdRoot(f)
	root.SetArgs(args)
	root.SetErr(&errOut)
	code := reportError(&errOut, root.Execute())
	return out.String(), errOut.String(), code
}

func TestHelpListsCompletionNotHiddenCommands(t *testing.T) {
	stdout, _, code := releaseRun(t, "--help")
	if code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	for _, line := range strings.Split(stdout, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "__watchdog") {
			t.Errorf("--help lists the hidden watchdog command: %q", line)
		}
	}
	if !strings.Contains(stdout, "completion") {
		t.Errorf("--help does not list the completion command:\n%s", stdout)
	}
}

func TestCompletionScripts(t *testing.T) {
	// What each shell's script must contain to register leasectl's completion.
	marks := map[string]string{
		"bash": "complete -o default -F __start_leasectl leasectl",
		"zsh":  "#compdef leasectl",
		"fish": "complete -c leasectl",
	}
	for shell, mark := range marks {
		stdout, stderr, code := releaseRun(t, "completion", shell)
		if code != exitOK {
			t.Errorf("completion %s: exit %d, stderr %q", shell, code, stderr)
			continue
		}
		if !strings.Contains(stdout, mark) {
			t.Errorf("completion %s: script lacks %q", shell, mark)
		}
	}
}

func TestCompletionHelpHasAnExample(t *testing.T) {
	stdout, _, code := releaseRun(t, "completion", "--help")
	if code != exitOK {
		t.Fatalf("completion --help: exit %d", code)
	}
	for _, want := range []string{"Examples:", "source <(leasectl completion bash)", "leasectl completion zsh", "leasectl completion fish"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("completion --help lacks %q:\n%s", want, stdout)
		}
	}
}
