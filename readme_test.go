package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/testenv"
)

// TestReadmeQuickStart runs every shell block of README.md's quick start, in
// order, against one fresh embedded store, as a new user would paste them.
func TestReadmeQuickStart(t *testing.T) {
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := quickStartBlocks(t, string(readme))
	state := t.TempDir()
	env := []string{
		"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + state,
		"XDG_STATE_HOME=" + state,
		"LEASECTL_LOG_LEVEL=warn",
	}
	var all bytes.Buffer
	for i, block := range blocks {
		cmd := exec.Command("sh", "-e", "-c", block)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		all.Write(out)
		if err != nil {
			t.Fatalf("quick-start block %d failed: %v\n%s\noutput:\n%s", i+1, err, block, out)
		}
	}
	// What the blocks' comments promise.
	for _, want := range []string{
		"hello\n",
		"job hello token ",
		"held elsewhere: exit 75",
		"my turn",
		"quarantined: exit 76",
		"running again",
	} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("quick start output lacks %q:\n%s", want, all.String())
		}
	}
}

var shellBlock = regexp.MustCompile("(?s)```sh\n(.*?)```")

func quickStartBlocks(t *testing.T, readme string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(readme, "<!-- quickstart -->")
	section, _, ok2 := strings.Cut(rest, "<!-- /quickstart -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no <!-- quickstart --> ... <!-- /quickstart --> section")
	}
	var blocks []string
	for _, m := range shellBlock.FindAllStringSubmatch(section, -1) {
		blocks = append(blocks, m[1])
	}
	if len(blocks) == 0 {
		t.Fatal("the quick start has no sh blocks")
	}
	return blocks
}

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}
