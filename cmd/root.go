// Package cmd holds leasectl's cobra commands: each parses and validates its
// flags, calls the package that does the work, and renders the result.
// Exit codes are decided in exit.go and nowhere else.
package cmd

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/leasectl/leasectl/leasestore"
)

// Set by the linker (see Makefile and .goreleaser.yaml).
var (
	version = "dev"
	commit  = "none"
	date    = "unknown"
)

// IOStreams are the process's standard streams and what they are attached to.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	StdinTTY  bool
	StdoutTTY bool
	StderrTTY bool
}

// GlobalOptions are the flags every command takes.
type GlobalOptions struct {
	Store     string
	Namespace string
	LogLevel  string
	LogFormat string
}

// Factory gives commands what they need from the outside world, so that a
// test can replace any of it.
type Factory struct {
	IO      *IOStreams
	Globals *GlobalOptions
	Now     func() time.Time
	// OpenStore opens the store named by the global flags.
	OpenStore func(ctx context.Context) (leasestore.Store, error)
}

// NewFactory returns the Factory of a real process.
func NewFactory() *Factory {
	g := &GlobalOptions{}
	f := &Factory{
		IO: &IOStreams{
			In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr,
			StdinTTY:  term.IsTerminal(int(os.Stdin.Fd())),
			StdoutTTY: term.IsTerminal(int(os.Stdout.Fd())),
			StderrTTY: term.IsTerminal(int(os.Stderr.Fd())),
		},
		Globals: g,
		Now:     time.Now,
	}
	f.OpenStore = func(ctx context.Context) (leasestore.Store, error) {
		loc, err := leasestore.ParseLocation(g.Store)
		if err != nil {
			return nil, usageError(err)
		}
		if err := leasestore.ValidateNamespace(g.Namespace); err != nil {
			return nil, usageError(err)
		}
		return leasestore.Open(ctx, loc, g.Namespace)
	}
	return f
}

// Logger returns the logger the global flags ask for, writing to stderr.
func (f *Factory) Logger() (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(strings.ToLower(f.Globals.LogLevel))
	if err != nil || f.Globals.LogLevel == "" {
		return zerolog.Nop(), usageError(fmt.Errorf("invalid --log-level %q: use trace, debug, info, warn or error", f.Globals.LogLevel))
	}
	var w io.Writer
	switch f.Globals.LogFormat {
	case "json":
		w = f.IO.ErrOut
	case "console":
		w = zerolog.ConsoleWriter{Out: f.IO.ErrOut, TimeFormat: "15:04:05.000", NoColor: !f.IO.StderrTTY}
	case "auto":
		if f.IO.StderrTTY {
			w = zerolog.ConsoleWriter{Out: f.IO.ErrOut, TimeFormat: "15:04:05.000"}
		} else {
			w = f.IO.ErrOut
		}
	default:
		return zerolog.Nop(), usageError(fmt.Errorf("invalid --log-format %q: use auto, console or json", f.Globals.LogFormat))
	}
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	zerolog.DurationFieldUnit = time.Millisecond
	return zerolog.New(w).Level(level).With().Timestamp().Logger(), nil
}

// NewCmdRoot builds the command tree.
func NewCmdRoot(f *Factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "leasectl",
		Short: "Run a command under a time-bound lease with a fencing token",
		Long: `leasectl runs a command under a time-bound lease: at most one copy per job runs at
any instant, across every host that shares the store. The child gets a fencing
token that rises with every grant, and is SIGKILLed with its whole process group
the moment the lease can no longer be renewed in time.

The store is the embedded local one by default (one host, no set-up), or Redis
with --store redis://host:6379 for many hosts.`,
		Example: `  # Run a command under a lease on the embedded store (one host):
  leasectl run --job hello -- echo hello

  # Across hosts, with Redis:
  LEASECTL_STORE=redis://127.0.0.1:6379/0 leasectl run --job nightly-report -- ./report.sh

  # On call: who holds what, and why a job is refused.
  leasectl ls
  leasectl status nightly-report
  leasectl quarantine list`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.SetVersionTemplate("leasectl {{.Version}}\n")
	g := f.Globals
	pf := root.PersistentFlags()
	pf.StringVar(&g.Store, "store", envOr("LEASECTL_STORE", ""), "store URL: redis://[user:pass@]host:port[/db], rediss://... (TLS), or file:///dir; default: the embedded store in $XDG_STATE_HOME/leasectl [$LEASECTL_STORE]")
	pf.StringVar(&g.Namespace, "namespace", envOr("LEASECTL_NAMESPACE", "leasectl"), "namespace of the store's keys, to share one store between teams [$LEASECTL_NAMESPACE]")
	pf.StringVar(&g.LogLevel, "log-level", envOr("LEASECTL_LOG_LEVEL", "info"), "log level: trace, debug, info, warn, error [$LEASECTL_LOG_LEVEL]")
	pf.StringVar(&g.LogFormat, "log-format", envOr("LEASECTL_LOG_FORMAT", "auto"), "log format: auto (console on a terminal, else json), console, json [$LEASECTL_LOG_FORMAT]")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })

	root.AddCommand(
		NewCmdVersion(f),
		NewCmdRun(f, nil),
		NewCmdWatchdog(f),
		NewCmdScan(f, nil),
		NewCmdQuarantine(f),
		NewCmdStatus(f, nil),
		NewCmdLs(f, nil),
		NewCmdToken(f),
	)
	addCompletion(root, f.IO.Out)
	return root
}

// Execute runs leasectl with the process's arguments and returns its exit
// code.
func Execute() int {
	f := NewFactory()
	root := NewCmdRoot(f)
	return reportError(f.IO.ErrOut, root.ExecuteContext(context.Background()))
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
