package cmd

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasectl/leasectl/leasestore"
)

// The argument and flag checks below say what is wrong in plain words, and
// how the command is used, where cobra and pflag would print their own
// ("accepts 1 arg(s), received 0", `strconv.ParseInt: parsing "abc"`).

// usage is c's usage line, for the messages below.
func usage(c *cobra.Command) string {
	return strings.TrimSuffix(c.UseLine(), " [flags]")
}

// noArgs refuses arguments to a command that takes none.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError(fmt.Errorf("%s takes no arguments, got %q (usage: %s)", c.CommandPath(), args[0], usage(c)))
	}
	return nil
}

// oneJob accepts exactly one argument, a valid job ID.
func oneJob(c *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return usageError(fmt.Errorf("%s needs a job ID (usage: %s)", c.CommandPath(), usage(c)))
	case len(args) > 1:
		return usageError(fmt.Errorf("%s takes one job ID, got %d: %q (usage: %s)", c.CommandPath(), len(args), args, usage(c)))
	}
	if err := leasestore.ValidateJobID(args[0]); err != nil {
		return usageError(err)
	}
	return nil
}

// required refuses a command whose required flags are missing, before
// cobra's own check words it as `required flag(s) "job" not set`.
func required(c *cobra.Command, names ...string) error {
	for _, name := range names {
		if !c.Flags().Changed(name) {
			return usageError(fmt.Errorf("%s needs --%s (usage: %s)", c.CommandPath(), name, usage(c)))
		}
	}
	return nil
}

// flagError says what is wrong with a flag in plain words: a value of the
// wrong kind, a missing value, or an unknown flag, where `run` adds that a
// flag of the command goes after --.
func flagError(c *cobra.Command, err error) error {
	var invalid *pflag.InvalidValueError
	var missing *pflag.ValueRequiredError
	var unknown *pflag.NotExistError
	switch {
	case errors.As(err, &invalid):
		f := invalid.GetFlag()
		return usageError(fmt.Errorf("invalid --%s %q: %s", f.Name, invalid.GetValue(), wanted(f.Value.Type(), invalid.GetValue())))
	case errors.As(err, &missing):
		return usageError(fmt.Errorf("--%s needs a value (usage: %s)", missing.GetFlag().Name, usage(c)))
	case errors.As(err, &unknown) && c.Name() == "run":
		return usageError(fmt.Errorf("%v: if it is the command's own, put -- before the command, as in: leasectl run --job ID [flags] -- CMD [ARGS...]", err))
	}
	return usageError(err)
}

// wanted says what a flag of type typ takes, given a value it refused.
func wanted(typ, value string) string {
	switch typ {
	case "duration":
		if _, err := strconv.ParseFloat(value, 64); err == nil {
			return fmt.Sprintf("a duration needs a unit, as in %sms, %ss or %sm", value, value, value)
		}
		return "want a duration such as 250ms, 30s, 5m or 1h"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "count":
		return "want a whole number"
	case "bool":
		return "want true or false"
	case timestampType:
		return "want an RFC 3339 time such as 2026-11-23T06:00:00Z or 2026-11-23T07:00:00+01:00"
	default:
		return "not a valid " + typ
	}
}

// showDefaults makes --help (and the man pages) show each flag's default as
// it applies and as the documentation writes it: the store URL taken from
// $LEASECTL_STORE without its password, durations without their zero
// units (1h, not 1h0m0s).
func showDefaults(root *cobra.Command) {
	if f := root.PersistentFlags().Lookup("store"); f != nil && f.DefValue != "" {
		f.DefValue = leasestore.Redact(f.DefValue)
	}
	var visit func(c *cobra.Command)
	visit = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Value.Type() == "duration" {
				f.DefValue = compactDuration(f.DefValue)
			}
		})
		for _, sub := range c.Commands() {
			visit(sub)
		}
	}
	visit(root)
}

// compactDuration drops the zero minutes and seconds Go writes after a
// whole number of hours or minutes: 1h0m0s is 1h, 5m0s is 5m.
func compactDuration(s string) string {
	if rest, ok := strings.CutSuffix(s, "m0s"); ok {
		s = rest + "m"
	}
	if rest, ok := strings.CutSuffix(s, "h0m"); ok {
		s = rest + "h"
	}
	return s
}

// timestampType is the type name pflag shows for a timestampFlag.
const timestampType = "timestamp"

// timestampFlag is a flag holding a point in time, written in RFC 3339.
type timestampFlag struct{ t *time.Time }

func (f timestampFlag) String() string {
	if f.t == nil || f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

func (f timestampFlag) Set(s string) error {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return err
	}
	*f.t = t
	return nil
}

func (timestampFlag) Type() string { return timestampType }
