package cmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// defaultLogLevel keeps leasectl quiet unless something went wrong: cron
// mails every line a job writes, and a successful run, a --min-interval
// skip or a refusal mapped to exit 0 has nothing to say. -v (info) brings
// back the lifecycle lines, -vv (debug) the details.
const defaultLogLevel = "warn"

// Log formats, as --log-format resolves them.
const (
	formatJSON    = "json"
	formatConsole = "console"
)

// logFormat resolves --log-format: auto is the console format, in colour
// only on a terminal. JSON is for those who ask: cron mails stderr, and a
// person reads it.
func (f *Factory) logFormat() (string, error) {
	switch f.Globals.LogFormat {
	case formatJSON, formatConsole:
		return f.Globals.LogFormat, nil
	case "auto":
		return formatConsole, nil
	default:
		return "", usageError(fmt.Errorf("invalid --log-format %q: use auto, console or json", f.Globals.LogFormat))
	}
}

// logLevel resolves --log-level and -v: each -v lowers the default level
// by one step (info, debug, trace), unless --log-level is lower already.
func (f *Factory) logLevel() (zerolog.Level, error) {
	level, err := zerolog.ParseLevel(strings.ToLower(f.Globals.LogLevel))
	if err != nil || f.Globals.LogLevel == "" || level > zerolog.ErrorLevel {
		return zerolog.NoLevel, usageError(fmt.Errorf("invalid --log-level %q: use trace, debug, info, warn or error", f.Globals.LogLevel))
	}
	if v := zerolog.WarnLevel - zerolog.Level(f.Globals.Verbose); f.Globals.Verbose > 0 && v < level {
		level = max(v, zerolog.TraceLevel)
	}
	return level, nil
}

// Logger returns the logger the global flags ask for, writing to stderr.
func (f *Factory) Logger() (zerolog.Logger, error) {
	return f.loggerTo(f.IO.ErrOut)
}

// loggerTo is Logger writing to w (stderr, or a writer in front of it).
func (f *Factory) loggerTo(w io.Writer) (zerolog.Logger, error) {
	level, err := f.logLevel()
	if err != nil {
		return zerolog.Nop(), err
	}
	format, err := f.logFormat()
	if err != nil {
		return zerolog.Nop(), err
	}
	return newLogger(w, format, f.IO.StderrTTY, level), nil
}

// newLogger writes JSON lines, or in the console format human lines:
// "leasectl: MESSAGE key=value ...", with the time in front at debug level
// and below, durations with their unit and empty fields left out (see
// consoleFields).
func newLogger(w io.Writer, format string, color bool, level zerolog.Level) zerolog.Logger {
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	zerolog.DurationFieldUnit = time.Millisecond
	if format == formatConsole {
		cw := zerolog.ConsoleWriter{
			Out: w, NoColor: !color, TimeFormat: "15:04:05.000",
			PartsOrder:    []string{zerolog.TimestampFieldName, zerolog.LevelFieldName, zerolog.MessageFieldName},
			FormatLevel:   func(any) string { return "leasectl:" },
			FormatPrepare: consoleFields,
		}
		if level > zerolog.DebugLevel {
			cw.PartsExclude = []string{zerolog.TimestampFieldName}
		}
		w = cw
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// durationFields are the fields logged with zerolog's Dur, which JSON
// writes as milliseconds without a unit. TestDurationFieldsAreKnown keeps
// the list whole.
var durationFields = map[string]bool{
	"duration": true, "max_runtime": true, "grace": true, "left": true, "expires_in": true,
	"safety": true, "rtt": true, "margin": true, "heartbeat": true, "interval": true, "late_by": true,
	"retry_in": true,
}

// consoleFields readies a log record's fields for a person: a duration
// gets its unit, rounded to three significant digits (4.28s, not
// 4280.386); an empty field is left out, and so is a reason the message
// already gives.
func consoleFields(rec map[string]any) error {
	msg, _ := rec[zerolog.MessageFieldName].(string)
	for k, v := range rec {
		switch {
		case v == nil || v == "":
			delete(rec, k)
		case k == "reason" && msg != "" && strings.Contains(msg, fmt.Sprint(v)):
			delete(rec, k)
		case durationFields[k]:
			if n, ok := v.(json.Number); ok {
				if ms, err := n.Float64(); err == nil {
					rec[k] = humanDuration(time.Duration(ms * float64(time.Millisecond)))
				}
			}
		}
	}
	return nil
}

// humanDuration is d to three significant digits, or to the second from
// 1000s on, without zero units: 4.28s, 200ms, 1m30s, 1h.
func humanDuration(d time.Duration) string {
	unit := time.Duration(1)
	for unit < time.Second && d.Abs() >= 1000*unit {
		unit *= 10
	}
	return compactDuration(d.Round(unit).String())
}

// lastWord says why leasectl exits with code, as one line on stderr: in
// JSON, an error record of log (which carries the run's fields); in the
// console format, "leasectl: MESSAGE". An empty message says nothing.
func lastWord(w io.Writer, log zerolog.Logger, format string, code int, msg string) {
	if msg == "" {
		return
	}
	if format == formatJSON {
		log.Error().Int("exit_code", code).Msg(msg)
		return
	}
	fmt.Fprintf(w, "leasectl: %s\n", msg)
}

// errorMessage is err's message on one line, or "" for an error that
// carries only an exit code.
func errorMessage(err error) string {
	var ee *exitError
	if err == nil || errors.As(err, &ee) && ee.err == nil {
		return ""
	}
	return strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", " ")
}

// report prints err as leasectl's last word, in the log format the flags
// ask for (JSON when they cannot be read), and returns the exit code.
func (f *Factory) report(err error) int {
	code := exitCode(err)
	format, ferr := f.logFormat()
	if ferr != nil {
		format = formatConsole
	}
	lastWord(f.IO.ErrOut, newLogger(f.IO.ErrOut, formatJSON, false, zerolog.TraceLevel), format, code, errorMessage(err))
	return code
}

// watchdogEnv is what the watchdog process needs to write its last word as
// the run's other lines: the resolved log format and level, the job and the
// worker.
func watchdogEnv(format string, level zerolog.Level, job, worker string) []string {
	return []string{"LEASECTL_LOG_FORMAT=" + format, "LEASECTL_LOG_LEVEL=" + level.String(), "LEASECTL_JOB_ID=" + job, "LEASECTL_WORKER_ID=" + worker}
}
