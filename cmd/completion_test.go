package cmd

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/testenv"
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

func TestCompletionOfAnUnknownShellIsAUsageError(t *testing.T) {
	if _, stderr, code := releaseRun(t, "completion", "tcsh"); code != exitUsage {
		t.Errorf("completion tcsh: exit %d, stderr %q; want 64", code, stderr)
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

// TestBashCompletesWithoutTheBashCompletionPackage sources the bash script
// in a bash without the bash-completion package (--norc loads none) and
// completes command lines as bash would on TAB: commands, job names from
// the store (a live lease, a quarantined job, a = and a : in them), and the
// values of the log flags.
func TestBashCompletesWithoutTheBashCompletionPackage(t *testing.T) {
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	env := append(userEnv(t), "LEASECTL_STORE=file://"+filepath.Join(t.TempDir(), "store"))
	for i, v := range env {
		if strings.HasPrefix(v, "PATH=") {
			env[i] = "PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + strings.TrimPrefix(v, "PATH=")
		}
	}
	holdJob(t, env, "etl:orders")
	if res := leasectlBinary(t, env, "quarantine", "add", "billing=v2", "--reason", "bad rows"); res.code != 0 {
		t.Fatalf("quarantine add: %+v", res)
	}
	if res := leasectlBinary(t, env, "run", "--job", "nightly-report", "--", "true"); res.code != 0 {
		t.Fatalf("run: %+v", res)
	}
	// complete sets what bash sets on TAB at the end of the line and prints
	// the replies, then a line "--".
	const script = `source <(leasectl completion bash) || exit 1
complete_line() {
	COMP_LINE=$1; COMP_POINT=${#COMP_LINE}
	read -ra COMP_WORDS <<< "$COMP_LINE"
	[[ $COMP_LINE == *" " ]] && COMP_WORDS+=("")
	COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
	COMPREPLY=()
	__start_leasectl leasectl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
	printf '%s\n' "${COMPREPLY[@]}"
	echo --
}
complete_line "leasectl sta"
complete_line "leasectl status "
complete_line "leasectl quarantine release b"
complete_line "leasectl run --job et"
complete_line "leasectl run --job n"
complete_line "leasectl stop "
complete_line "leasectl token check --job etl:"
complete_line "leasectl --log-format j"
complete_line "leasectl --log-level "
`
	cmd := exec.Command("bash", "--norc", "--noprofile", "-c", script)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr // compopt says it runs outside a real TAB
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bash: %v\n%s%s", err, out, stderr.String())
	}
	if strings.Contains(stderr.String(), "command not found") {
		t.Errorf("the script needs what bash lacks: %s", stderr.String())
	}
	got := strings.Split(strings.TrimSuffix(string(out), "--\n"), "--\n")
	want := []string{
		"status\n",
		"billing=v2\netl:orders\nnightly-report\n", // every job the store knows, sorted here, descriptions dropped
		"billing=v2\n",
		"etl:orders\n",
		"nightly-report\n", // a job at rest
		"etl:orders\n",     // stop: only jobs running now
		"orders\n",         // bash replaces only what follows the : itself
		"json\n",
		"debug\nerror\ninfo\ntrace\nwarn\n",
	}
	if len(got) != len(want) {
		t.Fatalf("bash printed %q", out)
	}
	for i := range want {
		if words := completionWords(got[i]); words != want[i] {
			t.Errorf("completion %d: got %q, want %q\n(all: %q)", i, words, want[i], out)
		}
	}
}

// completionWords keeps the words of bash's replies, sorted, without the
// descriptions the script adds when there are several.
func completionWords(replies string) string {
	var words []string
	for _, r := range strings.Split(strings.TrimSuffix(replies, "\n"), "\n") {
		if r != "" {
			words = append(words, strings.Fields(r)[0])
		}
	}
	slices.Sort(words)
	return strings.Join(words, "\n") + "\n"
}
