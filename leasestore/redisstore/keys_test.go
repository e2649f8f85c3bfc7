package redisstore

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestScriptsNameShardKeysThroughKEYS: the scripts reach the shard's keys
// (index, quarantine set, known jobs, due index, slots index) through their declared
// KEYS, never by a name they build, as Redis's scripting contract asks;
// only jobs' own keys are built by name, in the shard's slot (lib.lua).
func TestScriptsNameShardKeysThroughKEYS(t *testing.T) {
	files, err := filepath.Glob("lua/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts (%v)", err)
	}
	built := regexp.MustCompile(`\.\.\s*'(live|quarantined|jobs|due|slots)'`)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range built.FindAll(src, -1) {
			t.Errorf("%s builds a shard key by name (%s) instead of taking it from KEYS", f, m)
		}
	}
	if n := len((&Store{}).jobKeys("j")); n != 8 {
		t.Errorf("a per-job script gets %d KEYS, want 8 (lib.lua, declared_keys)", n)
	}
}
