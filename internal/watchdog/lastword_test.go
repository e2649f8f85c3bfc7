package watchdog

import (
	"testing"
	"time"
)

func TestLastWordIsTheRunsLogLine(t *testing.T) {
	at := time.Date(2026, 11, 27, 2, 10, 30, 638_000_000, time.UTC)
	const msg = "watchdog: killing the child's process group: the supervisor vanished"
	tests := []struct {
		name string
		lw   lastWord
		want string
	}{
		{"json", lastWord{json: true, job: "job-1", worker: "w"},
			`{"level":"error","job":"job-1","worker":"w","pgid":42,"time":"2026-11-27T02:10:30.638Z","message":"` + msg + `"}` + "\n"},
		{"json with the token", lastWord{json: true, job: "j", worker: "w", token: 7, tokend: true},
			`{"level":"error","job":"j","worker":"w","token":7,"pgid":42,"time":"2026-11-27T02:10:30.638Z","message":"` + msg + `"}` + "\n"},
		{"json escapes as zerolog", lastWord{json: true, job: "j", worker: "a\"b\\c\n\t\x01\x7fé\xff"},
			`{"level":"error","job":"j","worker":"a\"b\\c\n\t\u0001\u007fé\ufffd","pgid":42,"time":"2026-11-27T02:10:30.638Z","message":"` + msg + `"}` + "\n"},
		{"console", lastWord{job: "job-1", worker: "web-1:31337:5e91", token: 1795, tokend: true},
			"leasectl: " + msg + " job=job-1 pgid=42 token=1795 worker=web-1:31337:5e91\n"},
		{"console leaves out what is empty", lastWord{job: "j"},
			"leasectl: " + msg + " job=j pgid=42\n"},
		{"console quotes", lastWord{job: "j", worker: `host 1"x`},
			"leasectl: " + msg + ` job=j pgid=42 worker="host 1\"x"` + "\n"},
		{"console at debug level", lastWord{timed: true, job: "j", worker: "w"},
			"02:10:30.638 leasectl: " + msg + " job=j pgid=42 worker=w\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(tt.lw.line(msg, 42, at)); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestLastWordReadsTheRunsSettings(t *testing.T) {
	for _, tt := range []struct {
		format, level string
		json, timed   bool
	}{
		{"json", "warn", true, false}, {"console", "warn", false, false}, {"console", "debug", false, true},
		{"console", "trace", false, true}, {"", "", false, false},
	} {
		t.Setenv("LEASECTL_LOG_FORMAT", tt.format)
		t.Setenv("LEASECTL_LOG_LEVEL", tt.level)
		t.Setenv("LEASECTL_JOB_ID", "j")
		t.Setenv("LEASECTL_WORKER_ID", "w")
		lw := lastWordFromEnv()
		if lw.json != tt.json || lw.timed != tt.timed || lw.job != "j" || lw.worker != "w" {
			t.Errorf("format %q level %q: got %+v", tt.format, tt.level, lw)
		}
	}
}

func TestReadLinesKeepsTheLatestAndWaitsForWholeLines(t *testing.T) {
	deadline := int64(-1)
	var lw lastWord
	rest := readLines([]byte("D 100\nT 9\nbogus\nD x\nD 250\nD 3"), &deadline, &lw)
	if deadline != 250 || !lw.tokend || lw.token != 9 || string(rest) != "D 3" {
		t.Errorf("deadline %d token %d (%v) rest %q, want 250, 9 and the unfinished %q", deadline, lw.token, lw.tokend, rest, "D 3")
	}
}
