package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWritesOnePagePerVisibleCommand(t *testing.T) {
	// The builder's environment must not become the pages' defaults.
	t.Setenv("LEASECTL_STORE", "redis://:builders-s3cret@build-host:6379/0")
	t.Setenv("LEASECTL_LOG_LEVEL", "debug")
	dir := filepath.Join(t.TempDir(), "man1")
	if err := run([]string{"--dir", dir, "--version", "1.2.3", "--date", "2026-03-04T05:06:07Z"}); err != nil {
		t.Fatal(err)
	}
	for page, title := range map[string]string{
		"leasectl.1": "LEASECTL", "leasectl-run.1": "LEASECTL-RUN", "leasectl-scan.1": "LEASECTL-SCAN",
		"leasectl-quarantine-release.1": "LEASECTL-QUARANTINE-RELEASE", "leasectl-completion-bash.1": "LEASECTL-COMPLETION-BASH",
	} {
		body, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Errorf("page %s: %v", page, err)
			continue
		}
		// The .TH line: the page's own title, section, the build's month, source.
		if wantTH := `.TH "` + title + `" "1" "Mar 2026" "leasectl 1.2.3"`; !bytes.Contains(body, []byte(wantTH)) {
			t.Errorf("page %s lacks %s", page, wantTH)
		}
		if bytes.Contains(body, []byte("build-host")) || bytes.Contains(body, []byte(`default "debug"`)) {
			t.Errorf("page %s shows the builder's environment as a default", page)
		}
		if bytes.Contains(body, []byte("Auto generated")) {
			t.Errorf("page %s carries cobra's auto-generated tag, which changes every day", page)
		}
	}
	// Defaults that follow --ttl are shown as their rule, not as 0s.
	run, err := os.ReadFile(filepath.Join(dir, "leasectl-run.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`\fB--heartbeat\fP=--ttl/3`, `\fB--safety\fP=--ttl/2`, `\fB--grace\fP=min(10s, --ttl)`, `\fB--evidence-ttl\fP=max(1h, 2×--ttl)`} {
		if !bytes.Contains(run, []byte(want)) {
			t.Errorf("leasectl-run.1 lacks %s", want)
		}
	}
	pages, _ := filepath.Glob(filepath.Join(dir, "*.1"))
	for _, p := range pages {
		if strings.Contains(p, "__watchdog") {
			t.Errorf("the hidden watchdog command got a page: %s", p)
		}
	}
}

func TestRefusesBadArguments(t *testing.T) {
	if err := run(nil); err == nil || !strings.Contains(err.Error(), "--dir") {
		t.Errorf("run without --dir = %v, want an error naming --dir", err)
	}
	if err := run([]string{"--dir", t.TempDir(), "--date", "yesterday"}); err == nil {
		t.Error("run accepted a date that is not RFC 3339")
	}
}
