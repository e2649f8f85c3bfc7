package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// section returns the text of the markdown section of file that starts at
// heading (a whole heading line), up to the next heading of its level or
// higher.
func section(t *testing.T, file, heading string) string {
	t.Helper()
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(text), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no heading %q", file, heading)
	}
	level := strings.Index(heading, " ")
	end := regexp.MustCompile(`(?m)^#{1,` + string(rune('0'+level)) + `} `).FindStringIndex(rest)
	if end != nil {
		rest = rest[:end[0]]
	}
	return rest
}

// TestDesignRoadmapListsNothingBuilt: what docs/design.md says comes after
// v1 names no store leasectl already has.
func TestDesignRoadmapListsNothingBuilt(t *testing.T) {
	roadmap := section(t, "docs/design.md", "## 12. Beyond v1")
	for _, line := range strings.Split(roadmap, "\n") {
		for _, store := range []string{"Sentinel", "Cluster", "etcd store", "PostgreSQL store", "leasectl serve"} {
			if strings.HasPrefix(strings.TrimSpace(line), "- ") && strings.Contains(line, store) {
				t.Errorf("design.md §12 lists %s as to come: %q", store, line)
			}
		}
	}
	if strings.Contains(section(t, "docs/design.md", "## 1. What it is"), "are planned") {
		t.Error("design.md §1 says more stores are planned")
	}
}

// TestComparisonScopeNamesEveryStore: the comparison table's scope row for
// leasectl names every store the README points it at, and the registry.
func TestComparisonScopeNamesEveryStore(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	table := section(t, "README.md", "## Compared with flock, consul lock and etcdctl lock")
	row := regexp.MustCompile(`(?m)^\| scope \|.*\| ([^|]*) \|$`).FindStringSubmatch(table)
	if row == nil {
		t.Fatal("the comparison table has no scope row")
	}
	stores := regexp.MustCompile(`(?m)^## Pointing it at (\S+)$`).FindAllStringSubmatch(string(readme), -1)
	if len(stores) < 3 {
		t.Fatalf("found %d \"Pointing it at\" sections", len(stores))
	}
	want := []string{"embedded", "leasectl serve"}
	for _, s := range stores {
		want = append(want, s[1])
	}
	for _, want := range want {
		if !strings.Contains(row[1], want) {
			t.Errorf("leasectl's scope %q does not name %s", row[1], want)
		}
	}
}

// TestFromSourceNamesTheManPages: installing from source says how to get
// the man pages the packages install, with a make target that writes them.
func TestFromSourceNamesTheManPages(t *testing.T) {
	install := section(t, "README.md", "## Install")
	_, fromSource, _ := strings.Cut(install, "From source:")
	if !strings.Contains(fromSource, "`make man`") || !strings.Contains(fromSource, "gen/man") {
		t.Errorf("README's From source does not say how to get the man pages:\n%s", fromSource)
	}
	makefile, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	target := regexp.MustCompile(`(?m)^man:\n((?:\t.*\n)+)`).FindStringSubmatch(string(makefile))
	if target == nil || !strings.Contains(target[1], "./internal/genman --dir gen/man") {
		t.Errorf("the Makefile has no man target writing gen/man with internal/genman")
	}
}

// TestReadmeNamesEverySchemaStep: the README's warning that a schema
// migration stops the in-flight runs of an older leasectl names every
// PostgreSQL schema version after the first.
func TestReadmeNamesEverySchemaStep(t *testing.T) {
	tables, err := filepath.Glob("leasestore/pgstore/sql/tables_v*.sql")
	if err != nil || len(tables) < 2 {
		t.Fatalf("found schema versions %v (%v)", tables, err)
	}
	text := strings.Join(strings.Fields(section(t, "README.md", "## Pointing it at PostgreSQL")), " ")
	for _, file := range tables {
		v, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(file), "tables_v"), ".sql"))
		if err != nil {
			t.Fatalf("schema step %s is not named tables_vN.sql", file)
		}
		if v == 1 {
			continue
		}
		if !regexp.MustCompile(`[Vv]ersion ` + strconv.Itoa(v) + ` \(`).MatchString(text) {
			t.Errorf("README's PostgreSQL section does not name schema version %d among the steps that stop an older leasectl's runs", v)
		}
	}
}
