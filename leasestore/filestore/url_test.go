package filestore

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/leasestore"
)

func TestOpenURL(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/state")
	tests := []struct{ raw, wantDir, wantErr string }{
		{raw: "", wantDir: "/state/leasectl"},
		{raw: "file:///var/lib/leasectl", wantDir: "/var/lib/leasectl"},
		{raw: "file://localhost/var/lib/x/../leasectl", wantDir: "/var/lib/leasectl"},
		{raw: "file://relative/dir", wantErr: "local folder"},
		{raw: "file:relative", wantErr: "absolute path"},
		{raw: "file:///x?mode=ro", wantErr: "no user or query"},
	}
	for _, tt := range tests {
		s, err := leasestore.Open(t.Context(), strings.Replace(tt.raw, "/var/lib", t.TempDir()+"/var/lib", 1), "ns")
		if tt.wantErr != "" {
			var urlErr *leasestore.URLError
			if !errors.As(err, &urlErr) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Open(%q) = %v, want a *URLError saying %q", tt.raw, err, tt.wantErr)
			}
			continue
		}
		if tt.raw == "" {
			// The default folder may not be writable here: check the path only.
			if dir, _ := leasestore.StateDir(); dir != tt.wantDir {
				t.Errorf("leasestore.StateDir() = %q, want %q", dir, tt.wantDir)
			}
			continue
		}
		if err != nil {
			t.Errorf("Open(%q): %v", tt.raw, err)
			continue
		}
		if dir := s.Driver().(*Store).dir; !strings.HasSuffix(dir, tt.wantDir) {
			t.Errorf("Open(%q) opened %q, want a folder ending in %q", tt.raw, dir, tt.wantDir)
		}
	}
}

func TestStateDirWithoutXDG(t *testing.T) {
	home := t.TempDir()
	t.Setenv("XDG_STATE_HOME", "relative")
	t.Setenv("HOME", home)
	if dir, err := leasestore.StateDir(); err != nil || dir != home+"/.local/state/leasectl" {
		t.Fatalf("leasestore.StateDir() = %q, %v; want ~/.local/state/leasectl", dir, err)
	}
}

func TestStateDirOfASystemAccountWithoutHome(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", filepath.Join(t.TempDir(), "nonexistent"))
	dir, err := leasestore.StateDir()
	if !errors.Is(err, leasestore.ErrUnavailable) || !strings.Contains(err.Error(), "XDG_STATE_HOME") || !strings.Contains(err.Error(), "--store") {
		t.Fatalf("leasestore.StateDir() = %q, %v; want unavailable, naming XDG_STATE_HOME and --store", dir, err)
	}
}
