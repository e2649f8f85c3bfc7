//go:build linux

package main

import (
	"os"
	"testing"
)

// TestMarksOfRecordedTraces reads two recorded perf traces of `leasectl run
// --job j -- true` (one per store; their lines are not in time order across
// threads, and the child's execve is printed under its parent's name) and
// checks every mark against the events read off the files by hand.
func TestMarksOfRecordedTraces(t *testing.T) {
	for _, c := range []struct {
		file  string
		redis bool
		want  map[string]float64
	}{
		{"testdata/perf-trace-embedded.txt", false, map[string]float64{
			"start": 10.820, "pipe": 15.673, "store": 16.693, "watchdog_exec": 16.733, "child_exec": 17.528,
			"child_exit": 18.752, "kill": 18.944, "release": 19.304, "exit": 19.502,
		}},
		{"testdata/perf-trace-redis.txt", true, map[string]float64{
			"start": 0.095, "pipe": 3.386, "store": 4.054, "watchdog_exec": 4.072, "child_exec": 5.502,
			"child_exit": 6.223, "kill": 6.469, "release": 7.142, "exit": 7.409,
		}},
	} {
		text, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		m, err := marks(text, c.redis)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		for k, v := range c.want {
			if m[k] != v {
				t.Errorf("%s: %s at %.3f, want %.3f", c.file, k, m[k], v)
			}
		}
		if _, ok := m["watchdog_ready"]; ok {
			t.Errorf("%s: a watchdog_ready mark, but the watchdog never said it was ready", c.file)
		}
	}
}
