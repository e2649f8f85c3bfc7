package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

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
	// A clone after `make build`, and what Try it tells a newcomer to run
	// for bin/ to be on the PATH; that, and not the test, puts it there.
	clone := t.TempDir()
	if err := os.Mkdir(filepath.Join(clone, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(clone, "bin", "leasectl")); err != nil {
		t.Fatal(err)
	}
	onPath := regexp.MustCompile(`export PATH="[^"]*"`).FindString(tryIt(t, string(readme)))
	if onPath == "" {
		t.Fatal("README.md's Try it does not put bin/ on the PATH, which the quick start assumes")
	}
	preamble := onPath + "\n" + `[ "$(command -v leasectl)" = "$PWD/bin/leasectl" ] || { echo "leasectl on the PATH is not bin/leasectl" >&2; exit 1; }` + "\n"
	state := t.TempDir()
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + state,
		"XDG_STATE_HOME=" + state,
		"LEASECTL_LOG_LEVEL=warn",
	}
	var all bytes.Buffer
	for i, block := range blocks {
		cmd := exec.Command("sh", "-e", "-c", preamble+block)
		cmd.Dir = clone
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

// tryIt is the first shell block of README.md's Try it section.
func tryIt(t *testing.T, readme string) string {
	t.Helper()
	_, rest, ok := strings.Cut(readme, "\n## Try it\n")
	m := shellBlock.FindStringSubmatch(rest)
	if !ok || m == nil {
		t.Fatal("README.md has no Try it section with a shell block")
	}
	return m[1]
}

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

// TestReadmeLinks checks that README.md and docs/*.md link only inside the
// repository: every relative link names a file or folder of the repository,
// and its #section, if any, a heading of the Markdown file it names. Links
// leaving the repository (http(s)://, other schemes, absolute paths, ../
// above the root) are refused, so that the documentation a clone carries is
// whole.
func TestReadmeLinks(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md (err %v)", err)
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range append([]string{"README.md"}, docs...) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, link := range markdownLinks(string(text)) {
			if reason := checkLink(root, file, link); reason != "" {
				t.Errorf("%s links to %q: %s", file, link, reason)
			}
		}
	}
}

// TestLinksFromLuaToSemantics checks that every section of docs/semantics.md
// a Lua script cites ("semantics.md, Acquire") is a heading of that file.
func TestLinksFromLuaToSemantics(t *testing.T) {
	semantics, err := os.ReadFile("docs/semantics.md")
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, h := range markdownHeadings(string(semantics)) {
		headings[h] = true
	}
	cite := regexp.MustCompile(`semantics\.md,\s*(?:--\s*)?(\w+)`)
	cited := 0
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "dist" || d.Name() == "gen") {
			return filepath.SkipDir
		}
		if d.IsDir() || filepath.Ext(path) != ".lua" {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range cite.FindAllStringSubmatch(string(src), -1) {
			cited++
			if !headings[m[1]] {
				t.Errorf("%s cites section %q of semantics.md, which docs/semantics.md has no heading for", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cited == 0 {
		t.Fatal("no Lua script cites semantics.md: has the citation form changed?")
	}
}

// TestLinkCheckRules shows what TestReadmeLinks accepts and refuses, on a
// small repository of its own.
func TestLinkCheckRules(t *testing.T) {
	root := t.TempDir()
	for name, text := range map[string]string{
		"README.md":       "# Title\n\n## `leasectl run`\n\n### Exit codes\n",
		"docs/design.md":  "# Design\n\n## 5. Data model\n\n```sh\n# not a heading\n```\n",
		"docs/extra.md":   "# Extra\n",
		"leasestore/x.go": "package leasestore\n",
	} {
		path := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(root)
	for _, tc := range []struct {
		file, link string
		ok         bool
	}{
		{"README.md", "docs/design.md", true},
		{"README.md", "docs/design.md#5-data-model", true},
		{"README.md", "#leasectl-run", true},
		{"README.md", "#exit-codes", true},
		{"README.md", "leasestore/", true},
		{"docs/design.md", "../README.md#exit-codes", true},
		{"docs/design.md", "extra.md", true},
		{"README.md", "docs/missing.md", false},
		{"README.md", "docs/design.md#not-a-heading", false},
		{"README.md", "#title-1", false},
		{"README.md", "../shared/DESIGN.md", false},
		{"docs/design.md", "../../outside.md", false},
		{"README.md", "/etc/passwd", false},
		{"README.md", "https://example.com/leasectl", false},
		{"README.md", "http://example.com", false},
		{"README.md", "mailto:ops@example.com", false},
	} {
		reason := checkLink(root, tc.file, tc.link)
		if (reason == "") != tc.ok {
			t.Errorf("%s -> %q: accepted %v (%q), want %v", tc.file, tc.link, reason == "", reason, tc.ok)
		}
	}
	text := "See [the design](docs/design.md), <https://a.example>, https://b.example/x and\n" +
		"[ref]: docs/extra.md\n\n```sh\ncurl http://in-code.example\n```\nand `http://in-span.example`.\n"
	got := strings.Join(markdownLinks(text), " ")
	if want := "docs/design.md docs/extra.md https://a.example https://b.example/x"; got != want {
		t.Errorf("markdownLinks = %q, want %q", got, want)
	}
}

var (
	fencedBlock   = regexp.MustCompile("(?ms)^[ \t]*```.*?^[ \t]*```[^\n]*$")
	codeSpan      = regexp.MustCompile("`[^`\n]*`")
	inlineLink    = regexp.MustCompile(`\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	referenceLink = regexp.MustCompile(`(?m)^[ \t]{0,3}\[[^\]]+\]:\s*<?([^\s>]+)`)
	autoLink      = regexp.MustCompile(`<([A-Za-z][A-Za-z0-9+.-]*:[^>\s]*)>`)
	bareURL       = regexp.MustCompile(`(?i)\bhttps?://[^\s)>\]]+`)
	headingLine   = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t#]*$`)
	scheme        = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// markdownProse is text without its fenced code blocks and code spans,
// where nothing is a link.
func markdownProse(text string) string {
	return codeSpan.ReplaceAllString(fencedBlock.ReplaceAllString(text, ""), "")
}

// markdownLinks returns the targets of text's inline links and images,
// reference definitions, autolinks and bare http(s) URLs (which GitHub
// renders as links), outside code.
func markdownLinks(text string) []string {
	prose := markdownProse(text)
	var links []string
	for _, re := range []*regexp.Regexp{inlineLink, referenceLink, autoLink} {
		for _, m := range re.FindAllStringSubmatch(prose, -1) {
			links = append(links, m[1])
		}
	}
	links = append(links, bareURL.FindAllString(inlineLink.ReplaceAllString(autoLink.ReplaceAllString(prose, ""), "]()"), -1)...)
	return links
}

// checkLink returns why link, found in file, does not resolve inside the
// repository at root, or "" when it does.
func checkLink(root, file, link string) string {
	if link == "" {
		return "empty link"
	}
	if scheme.MatchString(link) {
		return "it leaves the repository: link to a file in the repository instead"
	}
	target, anchor, _ := strings.Cut(link, "#")
	path := file
	if target != "" {
		if filepath.IsAbs(target) {
			return "an absolute path: use a path relative to " + file
		}
		path = filepath.Join(filepath.Dir(file), filepath.FromSlash(target))
		abs, err := filepath.Abs(path)
		if err != nil {
			return err.Error()
		}
		if rel, err := filepath.Rel(root, abs); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return "it leaves the repository"
		}
		if _, err := os.Stat(path); err != nil {
			return "no such file in the repository"
		}
	}
	if anchor == "" || filepath.Ext(path) != ".md" {
		return ""
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	for _, h := range markdownHeadings(string(text)) {
		if headingAnchor(h) == anchor {
			return ""
		}
	}
	return "no heading in " + path + " makes the anchor #" + anchor
}

// markdownHeadings returns the text of text's ATX headings, outside code.
func markdownHeadings(text string) []string {
	var hs []string
	for _, m := range headingLine.FindAllStringSubmatch(fencedBlock.ReplaceAllString(text, ""), -1) {
		hs = append(hs, m[1])
	}
	return hs
}

// headingAnchor is the anchor GitHub gives a heading: its text without
// markup, lower-cased, with every character other than letters, digits,
// spaces, '-' and '_' dropped and spaces turned into '-'. (Repeated headings
// get -1, -2, ... suffixes, which these documents do not rely on.)
func headingAnchor(heading string) string {
	heading = inlineLink.ReplaceAllString(heading, "]")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}
