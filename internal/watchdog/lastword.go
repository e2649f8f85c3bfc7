package watchdog

import (
	"strconv"
	"syscall"
	"time"
	"unicode/utf8"
)

// lastWord is what the watchdog needs to say why it kills the group as the
// run's other log lines say things: the format and level the run resolved
// and its job and worker, which the supervisor puts in its environment
// (cmd's watchdogEnv), and the token, which it writes on its stdin.
type lastWord struct {
	json   bool // a JSON record; else a console line
	timed  bool // a console line starts with the time, as at debug level and below
	job    string
	worker string
	token  int64
	tokend bool // token was told
}

// lastWordFromEnv reads the run's log settings from the environment.
func lastWordFromEnv() lastWord {
	format, _ := syscall.Getenv("LEASECTL_LOG_FORMAT")
	level, _ := syscall.Getenv("LEASECTL_LOG_LEVEL")
	job, _ := syscall.Getenv("LEASECTL_JOB_ID")
	worker, _ := syscall.Getenv("LEASECTL_WORKER_ID")
	return lastWord{json: format == "json", timed: level == "trace" || level == "debug", job: job, worker: worker}
}

// Formats of the run's logger (cmd's newLogger): a JSON record's time, and
// a console line's.
const (
	jsonTime    = "2006-01-02T15:04:05.000Z07:00"
	consoleTime = "15:04:05.000"
)

// line is the error record saying msg, by the watchdog leading group pgid,
// at now: the JSON record zerolog writes, or the console line cmd's
// console writer does (fields in name order, empty ones left out).
func (w lastWord) line(msg string, pgid int, now time.Time) []byte {
	if w.json {
		b := []byte(`{"level":"error","job":`)
		b = appendJSON(b, w.job)
		b = appendJSON(append(b, `,"worker":`...), w.worker)
		if w.tokend {
			b = strconv.AppendInt(append(b, `,"token":`...), w.token, 10)
		}
		b = strconv.AppendInt(append(b, `,"pgid":`...), int64(pgid), 10)
		b = appendJSON(append(b, `,"time":`...), now.Format(jsonTime))
		b = appendJSON(append(b, `,"message":`...), msg)
		return append(b, "}\n"...)
	}
	var b []byte
	if w.timed {
		b = append(now.AppendFormat(b, consoleTime), ' ')
	}
	b = append(append(b, "leasectl: "...), msg...)
	// In name order, as the console writer sorts them.
	fields := [][2]string{{"job", consoleValue(w.job)}, {"pgid", strconv.Itoa(pgid)}, {"token", ""}, {"worker", consoleValue(w.worker)}}
	if w.tokend {
		fields[2][1] = strconv.FormatInt(w.token, 10)
	}
	for _, f := range fields {
		if f[1] != "" {
			b = append(append(append(append(b, ' '), f[0]...), '='), f[1]...)
		}
	}
	return append(b, '\n')
}

// consoleValue is a string field as the console writer shows it: quoted
// when it holds anything but printable ASCII other than a space, a
// backslash or a quote.
func consoleValue(s string) string {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e || c == ' ' || c == '\\' || c == '"' {
			return strconv.Quote(s)
		}
	}
	return s
}

// appendJSON appends s as a JSON string, escaped as zerolog escapes it:
// quotes, backslashes and control bytes, and invalid UTF-8 as U+FFFD.
func appendJSON(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch {
		case c >= 0x20 && c != 0x7f && c != '"' && c != '\\':
			b = append(b, c)
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\b':
			b = append(b, `\b`...)
		case c == '\f':
			b = append(b, `\f`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '\r':
			b = append(b, `\r`...)
		case c == '\t':
			b = append(b, `\t`...)
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
	}
	return append(b, '"')
}
