package cmd

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestConsoleLinesAreForPeople: the console format gives durations their
// unit to three significant digits, and leaves out empty fields and a
// reason the message already gives; JSON keeps every field as it is.
func TestConsoleLinesAreForPeople(t *testing.T) {
	log := func(format string) string {
		var b bytes.Buffer
		l := newLogger(&b, format, false, zerolog.WarnLevel)
		l.Warn().
			Str("outcome", "failed").Dur("duration", 4280386*time.Microsecond).Str("reason", "").
			Dur("max_runtime", 2*time.Hour).Dur("left", 2804619*time.Nanosecond).Msg("child ended: failed exit 3")
		return b.String()
	}
	if got, want := log(formatConsole), "leasectl: child ended: failed exit 3 duration=4.28s left=2.8ms max_runtime=2h outcome=failed\n"; got != want {
		t.Errorf("console:\n got %q\nwant %q", got, want)
	}
	if got := log(formatJSON); !strings.Contains(got, `"duration":4280.386`) || !strings.Contains(got, `"reason":""`) {
		t.Errorf("JSON %q: want durations in milliseconds and every field", got)
	}

	var b bytes.Buffer
	l := newLogger(&b, formatConsole, false, zerolog.WarnLevel)
	l.Warn().Str("reason", "killed by SIGSEGV").Msg("child ended: crashed: killed by SIGSEGV")
	if got := b.String(); strings.Contains(got, "reason=") {
		t.Errorf("console %q repeats the reason the message gives", got)
	}
}

func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		4280386 * time.Microsecond: "4.28s", 200 * time.Millisecond: "200ms", 2804619: "2.8ms", 999: "999ns",
		90 * time.Second: "1m30s", time.Hour: "1h", 5415400 * time.Millisecond: "1h30m15s", 0: "0s", -1500 * time.Millisecond: "-1.5s",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%d) = %q, want %q", d, got, want)
		}
	}
}

// TestDurationFieldsAreKnown: every field the module's code logs with Dur
// is one the console format gives a unit to.
func TestDurationFieldsAreKnown(t *testing.T) {
	dur := regexp.MustCompile(`\bDur\("([a-z_]+)"`)
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range dur.FindAllStringSubmatch(string(src), -1) {
			if !durationFields[m[1]] {
				t.Errorf("%s logs the duration %q, which durationFields does not list", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
