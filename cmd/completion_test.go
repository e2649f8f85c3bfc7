package cmd

import (
	"bytes"
	"os"
	"path/filepath"
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

// releaseBuildInfo stands in for the linker's -X flags for one test.
func releaseBuildInfo(t *testing.T, v, d string) {
	t.Helper()
	oldV, oldD := version, date
	version, date = v, d
	t.Cleanup(func() { version, date = oldV, oldD })
}

func TestManWritesOnePagePerVisibleCommand(t *testing.T) {
	releaseBuildInfo(t, "1.2.3", "2026-03-04T05:06:07Z")
	dir := filepath.Join(t.TempDir(), "man1")

	_, stderr, code := releaseRun(t, "man", "--dir", dir)
	if code != exitOK {
		t.Fatalf("man --dir: exit %d, stderr %q", code, stderr)
	}

	for _, page := range []string{"leasectl.1", "leasectl-version.1", "leasectl-completion.1", "leasectl-completion-bash.1"} {
		body, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Errorf("page %s: %v", page, err)
			continue
		}
		// The .TH line: title, section, the build's month, source.
		wantTH := `.TH "LEASECTL" "1" "Mar 2026" "leasectl 1.2.3"`
		if !bytes.Contains(body, []byte(wantTH)) {
			t.Errorf("page %s does not start with %s:\n%s", page, wantTH, releaseHead(body, 3))
		}
		if bytes.Contains(body, []byte("Auto generated")) {
			t.Errorf("page %s carries cobra's auto-generated tag, which changes every day", page)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "leasectl-man.1")); err == nil {
		t.Error("the hidden man command got a page of its own")
	}
}

func TestManWithoutDirIsAUsageError(t *testing.T) {
	_, stderr, code := releaseRun(t, "man")
	if code != exitUsage {
		t.Fatalf("man without --dir: exit %d, want %d (stderr %q)", code, exitUsage, stderr)
	}
	if !strings.Contains(stderr, "--dir") {
		t.Errorf("stderr %q does not name the missing flag", stderr)
	}
}

func TestManIsHiddenFromHelp(t *testing.T) {
	stdout, _, code := releaseRun(t, "--help")
	if code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	for _, line := range strings.Split(stdout, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "man ") {
			t.Errorf("--help lists the hidden man command: %q", line)
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

func releaseHead(b []byte, n int) string {
	lines := strings.SplitN(string(b), "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
