package packaging

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"go.yaml.in/yaml/v3"
)

// releaseConfig is the part of .goreleaser.yaml the checks below read.
type releaseConfig struct {
	Builds []struct {
		ID      string   `yaml:"id"`
		Main    string   `yaml:"main"`
		Binary  string   `yaml:"binary"`
		Goos    []string `yaml:"goos"`
		Goarch  []string `yaml:"goarch"`
		Env     []string `yaml:"env"`
		Flags   []string `yaml:"flags"`
		Ldflags []string `yaml:"ldflags"`
	} `yaml:"builds"`
	Archives []struct {
		IDs []string `yaml:"ids"`
	} `yaml:"archives"`
	Nfpms []struct {
		IDs              []string `yaml:"ids"`
		PackageName      string   `yaml:"package_name"`
		FileNameTemplate string   `yaml:"file_name_template"`
		Formats          []string `yaml:"formats"`
		Bindir           string   `yaml:"bindir"`
		Contents         []struct {
			Src      string `yaml:"src"`
			Dst      string `yaml:"dst"`
			Type     string `yaml:"type"`
			Packager string `yaml:"packager"`
			FileInfo struct {
				Mode int `yaml:"mode"`
			} `yaml:"file_info"`
		} `yaml:"contents"`
		Scripts map[string]string `yaml:"scripts"`
	} `yaml:"nfpms"`
}

func loadReleaseConfig(t *testing.T) releaseConfig {
	t.Helper()
	raw, err := os.ReadFile("../.goreleaser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c releaseConfig
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("parse .goreleaser.yaml: %v", err)
	}
	if len(c.Builds) != 2 || len(c.Archives) != 1 || len(c.Nfpms) != 1 {
		t.Fatalf("want two builds (leasectl, its watchdog), one archive and one nfpm entry, got %d, %d and %d", len(c.Builds), len(c.Archives), len(c.Nfpms))
	}
	return c
}

// The linker ignores -X for a variable that does not exist: a renamed
// variable would silently ship releases that call themselves "dev".
func TestLdflagsNameStringVariablesOfCmd(t *testing.T) {
	c := loadReleaseConfig(t)
	vars := packageStringVars(t, "../cmd")
	set := regexp.MustCompile(`-X\s+github\.com/leasectl/leasectl/cmd\.(\w+)=`)
	var found []string
	for _, f := range c.Builds[0].Ldflags {
		for _, m := range set.FindAllStringSubmatch(f, -1) {
			found = append(found, m[1])
			if !vars[m[1]] {
				t.Errorf("ldflags set cmd.%s, which is not a package-level string variable of cmd", m[1])
			}
		}
	}
	for _, want := range []string{"version", "commit", "date"} {
		if !slices.Contains(found, want) {
			t.Errorf("ldflags do not set cmd.%s", want)
		}
	}
}

// docs/design.md §5: builds are static; -trimpath keeps build paths out of the binary.
func TestBuildIsStatic(t *testing.T) {
	for _, b := range loadReleaseConfig(t).Builds {
		if !slices.Contains(b.Env, "CGO_ENABLED=0") {
			t.Errorf("build %s env %v lacks CGO_ENABLED=0", b.ID, b.Env)
		}
		if !slices.Contains(b.Flags, "-trimpath") {
			t.Errorf("build %s flags %v lack -trimpath", b.ID, b.Flags)
		}
	}
}

// leasectl runs the small watchdog from its own folder (docs/design.md
// §6.1): it is built for every platform leasectl is, and every archive and
// package that holds leasectl holds it too, in the same folder.
func TestTheWatchdogShipsBesideLeasectl(t *testing.T) {
	c := loadReleaseConfig(t)
	main, wd := c.Builds[0], c.Builds[1]
	if main.Binary != "leasectl" || wd.Binary != "leasectl-watchdog" || wd.Main != "./cmd/leasectl-watchdog" {
		t.Fatalf("builds %s and %s from %s, want leasectl, then leasectl-watchdog from ./cmd/leasectl-watchdog", main.Binary, wd.Binary, wd.Main)
	}
	if !slices.Equal(main.Goos, wd.Goos) || !slices.Equal(main.Goarch, wd.Goarch) {
		t.Errorf("the watchdog is built for %v/%v, leasectl for %v/%v", wd.Goos, wd.Goarch, main.Goos, main.Goarch)
	}
	for what, ids := range map[string][]string{"the archive": c.Archives[0].IDs, "the package": c.Nfpms[0].IDs} {
		if !slices.Equal(ids, []string{main.ID, wd.ID}) {
			t.Errorf("%s holds the builds %v, want %v", what, ids, []string{main.ID, wd.ID})
		}
	}
}

// Each service's unit is installed from packaging/, runs the command it
// is for, and reads an environment file the package installs as an
// operator's config (kept on upgrade, 0600: it may hold a Redis password);
// so are the files a unit names on its command line (the registry's tokens).
func TestUnitsMatchWhatThePackageInstalls(t *testing.T) {
	n := loadReleaseConfig(t).Nfpms[0]
	tests := []struct {
		unit    string
		command []string // after the binary
		env     string   // its environment file, from packaging/
		files   []string // config files named by ExecStart, from packaging/
	}{
		{"leasectl-reaper.service", []string{"scan", "--watch"}, "leasectl.env", nil},
		{"leasectl-registry.service", []string{"serve", "--tokens", "/etc/leasectl/registry.tokens"}, "registry.env", []string{"/etc/leasectl/registry.tokens"}},
	}
	installed := map[string]int{} // dst -> index in Contents
	for i, c := range n.Contents {
		installed[c.Dst] = i
	}
	wantConfig := func(dst, src string) {
		t.Helper()
		i, ok := installed[dst]
		if !ok {
			t.Errorf("%s is not installed by the package", dst)
			return
		}
		c := n.Contents[i]
		if c.Src != src {
			t.Errorf("%s comes from %q, want %s", dst, c.Src, src)
		}
		if c.Type != "config|noreplace" {
			t.Errorf("%s has type %q: an upgrade would overwrite the operator's settings", dst, c.Type)
		}
		if c.FileInfo.Mode != 0o600 {
			t.Errorf("%s has mode %#o, want 0600: it may hold secrets", dst, c.FileInfo.Mode)
		}
	}
	for _, tc := range tests {
		t.Run(tc.unit, func(t *testing.T) {
			unit := unitDirectives(t, tc.unit)
			dst := "/usr/lib/systemd/system/" + tc.unit
			if i, ok := installed[dst]; !ok || n.Contents[i].Src != "packaging/"+tc.unit {
				t.Errorf("the package does not install packaging/%s as %s", tc.unit, dst)
			}
			exec := strings.Fields(unit["ExecStart"])
			want := append([]string{filepath.Join(n.Bindir, "leasectl")}, tc.command...)
			if len(exec) < len(want) || !slices.Equal(exec[:len(want)], want) {
				t.Errorf("ExecStart=%s, want %s ...", unit["ExecStart"], strings.Join(want, " "))
			}
			env := strings.TrimPrefix(unit["EnvironmentFile"], "-")
			if env != "/etc/leasectl/"+tc.env {
				t.Errorf("EnvironmentFile=%s, want /etc/leasectl/%s", unit["EnvironmentFile"], tc.env)
			}
			wantConfig(env, "packaging/"+tc.env)
			for _, f := range tc.files {
				wantConfig(f, "packaging/"+filepath.Base(f))
			}
		})
	}
}

// Every file the package takes from the repository exists, and the install
// scripts are shell scripts that can be run.
func TestPackagedSourcesExist(t *testing.T) {
	n := loadReleaseConfig(t).Nfpms[0]
	for _, c := range n.Contents {
		if c.Src == "" || strings.HasPrefix(c.Src, "gen/") { // gen/ is made by the before hook
			continue
		}
		if _, err := os.Stat(filepath.Join("..", c.Src)); err != nil {
			t.Errorf("content %s -> %s: %v", c.Src, c.Dst, err)
		}
	}
	for _, hook := range []string{"postinstall", "preremove", "postremove"} {
		path := n.Scripts[hook]
		if path == "" {
			t.Errorf("no %s script", hook)
			continue
		}
		fi, err := os.Stat(filepath.Join("..", path))
		if err != nil {
			t.Errorf("%s script: %v", hook, err)
			continue
		}
		if fi.Mode()&0o111 == 0 {
			t.Errorf("%s script %s is not executable", hook, path)
		}
		body, err := os.ReadFile(filepath.Join("..", path))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(body), "#!/bin/sh\n") {
			t.Errorf("%s script %s does not start with #!/bin/sh", hook, path)
		}
	}
}

// The completions go where each shell of each family looks for them.
func TestCompletionDestinations(t *testing.T) {
	want := map[string]string{ // dst -> packager ("" for both)
		"/usr/share/bash-completion/completions/leasectl":    "",
		"/usr/share/zsh/vendor-completions/_leasectl":        "deb",
		"/usr/share/zsh/site-functions/_leasectl":            "rpm",
		"/usr/share/fish/vendor_completions.d/leasectl.fish": "",
	}
	for _, c := range loadReleaseConfig(t).Nfpms[0].Contents {
		if p, ok := want[c.Dst]; ok {
			if c.Packager != p {
				t.Errorf("%s is installed for packager %q, want %q", c.Dst, c.Packager, p)
			}
			delete(want, c.Dst)
		}
	}
	for dst := range want {
		t.Errorf("no completion installed at %s", dst)
	}
}

// packageStringVars returns the package-level variables of the package in
// dir that are plain strings, the only kind -X can set.
func packageStringVars(t *testing.T, dir string) map[string]bool {
	t.Helper()
	vars := map[string]bool{}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				v, ok := spec.(*ast.ValueSpec)
				if !ok || !isStringVar(v) {
					continue
				}
				for _, n := range v.Names {
					vars[n.Name] = true
				}
			}
		}
	}
	return vars
}

// isStringVar reports whether v is declared as a string or initialised with
// string literals only.
func isStringVar(v *ast.ValueSpec) bool {
	if v.Type != nil {
		id, ok := v.Type.(*ast.Ident)
		return ok && id.Name == "string"
	}
	if len(v.Values) != len(v.Names) {
		return false
	}
	for _, e := range v.Values {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return false
		}
	}
	return true
}

// unitDirectives reads a systemd unit's Key=Value lines; a repeated key keeps
// its last value.
func unitDirectives(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: not a Key=Value line: %q", path, line)
		}
		d[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

// The README's install commands name the package files the release builds:
// each pattern matches the name the file name template gives, for every
// format, on the architectures the README names.
func TestReadmeInstallCommandsNameTheReleasedPackages(t *testing.T) {
	n := loadReleaseConfig(t).Nfpms[0]
	tmpl, err := template.New("file_name_template").Option("missingkey=error").Parse(n.FileNameTemplate)
	if err != nil {
		t.Fatalf("file_name_template %q: %v", n.FileNameTemplate, err)
	}
	var name strings.Builder
	// The fields goreleaser gives the template for a linux/amd64 build of
	// version 1.2.3; it adds the format's extension.
	fields := map[string]string{"PackageName": n.PackageName, "ProjectName": "leasectl", "Version": "1.2.3", "Os": "linux", "Arch": "amd64"}
	if err := tmpl.Execute(&name, fields); err != nil {
		t.Fatalf("file_name_template %q needs more than %v: name the files with those fields, so that the README can say them", n.FileNameTemplate, fields)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	install := regexp.MustCompile(`(?m)^sudo (?:dpkg|rpm) -i (\S+)`).FindAllStringSubmatch(string(readme), -1)
	if len(install) == 0 {
		t.Fatal("the README has no install command")
	}
	for _, format := range n.Formats {
		file := name.String() + "." + format
		matched := false
		for _, m := range install {
			if ok, _ := filepath.Match(m[1], file); ok {
				matched = true
			}
		}
		if !matched {
			t.Errorf("no README install command names %s, the %s package the release builds", file, format)
		}
	}
}
