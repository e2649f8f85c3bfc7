package cmd

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/internal/testenv"
	"github.com/leasectl/leasectl/internal/watchdog"
)

// The watchdog writes its last word without zerolog, to stay small: both
// of its programs, given the environment `run` gives them, must write the
// line the run's own logger would.
func TestWatchdogsLastWordIsTheRunsLogLine(t *testing.T) {
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	programs := []string{filepath.Join(filepath.Dir(bin), watchdog.Program), testenv.Alone(t)}
	const worker = `web 1:"x"\é`
	for _, tt := range []struct {
		format string
		level  zerolog.Level
	}{{formatJSON, zerolog.WarnLevel}, {formatConsole, zerolog.WarnLevel}, {formatConsole, zerolog.DebugLevel}} {
		for _, prog := range programs {
			t.Run(tt.format+"/"+tt.level.String()+"/"+filepath.Base(prog), func(t *testing.T) {
				cmd := exec.Command(prog, watchdog.Arg)
				cmd.Env = append(os.Environ(), watchdogEnv(tt.format, tt.level, "nightly", worker)...)
				cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				cmd.Stdin = bytes.NewBufferString(watchdog.TokenLine(1795))
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				err := cmd.Run()
				if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
					t.Fatalf("the watchdog ended with %v, want killed with its group when its stdin ended", err)
				}
				var want bytes.Buffer
				log := newLogger(&want, tt.format, false, tt.level).With().Str("job", "nightly").Str("worker", worker).Int64("token", 1795).Logger()
				log.Error().Int("pgid", cmd.Process.Pid).Msg("watchdog: killing the child's process group: the supervisor vanished")
				if got, want := withoutTime(stderr.String()), withoutTime(want.String()); got != want {
					t.Errorf("the watchdog said\n%q\nthe run's logger says\n%q", got, want)
				}
			})
		}
	}
}

// logTime matches a log line's time, JSON's or the console's.
var logTime = regexp.MustCompile(`\d\d:\d\d:\d\d\.\d\d\d`)

// withoutTime is a log line with its time of day blanked: the watchdog's
// and the logger's are written at different instants.
func withoutTime(line string) string {
	return logTime.ReplaceAllString(line, "HH:MM:SS.mmm")
}

// A leasectl-watchdog beside leasectl that cannot start (a broken copy, a
// file this user may not run) costs no run: leasectl runs its own binary
// as the watchdog instead.
func TestABrokenWatchdogProgramFallsBackToLeasectl(t *testing.T) {
	for _, tt := range []struct {
		name string
		body string
		mode os.FileMode
	}{
		{"not a program", "not an executable\n", 0o755},
		{"not executable", "", 0o644},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bin := testenv.Alone(t)
			small := filepath.Join(filepath.Dir(bin), watchdog.Program)
			if err := os.WriteFile(small, []byte(tt.body), tt.mode); err != nil {
				t.Fatal(err)
			}
			res := runCommand(t, userEnv(t), []string{bin, "run", "--job", "fallback", "--", "true"})
			if res.code != 0 {
				t.Fatalf("run with a broken %s beside leasectl: exit %d, stderr %q; want 0", watchdog.Program, res.code, res.stderr)
			}
		})
	}
}
