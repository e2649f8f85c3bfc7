// Package cmd holds leasectl's cobra commands: each parses and validates its
// flags, calls the package that does the work, and renders the result.
// Exit codes are decided in exit.go and nowhere else.
package cmd

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/leasectl/leasectl/internal/watchdog"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/outbox"

	// The store drivers, registered by URL scheme.
	_ "github.com/leasectl/leasectl/leasestore/etcdstore"
	_ "github.com/leasectl/leasectl/leasestore/filestore"
	_ "github.com/leasectl/leasectl/leasestore/httpstore"
	_ "github.com/leasectl/leasectl/leasestore/pgstore"
	_ "github.com/leasectl/leasectl/leasestore/redisstore"
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
	// TerminalWidth returns the width of the terminal on stdout in columns,
	// 0 when unknown; nil stands for unknown.
	TerminalWidth func() int
}

// GlobalOptions are the flags every command takes.
type GlobalOptions struct {
	Store     string
	Namespace string
	LogLevel  string
	LogFormat string
	Verbose   int // -v: one step more verbose than --log-level's default per -v
}

// Factory gives commands what they need from the outside world, so that a
// test can replace any of it.
type Factory struct {
	IO      *IOStreams
	Globals *GlobalOptions
	Now     func() time.Time
	// OpenStore opens the store named by the global flags.
	OpenStore func(ctx context.Context) (*leasestore.Store, error)
	// Outbox returns this host's outbox for the store and namespace named
	// by the global flags (package outbox), or nil when the state folder is
	// unknown.
	Outbox func() *outbox.Box
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
			TerminalWidth: func() int {
				w, _, err := term.GetSize(int(os.Stdout.Fd()))
				if err != nil {
					return 0
				}
				return w
			},
		},
		Globals: g,
		Now:     time.Now,
	}
	f.OpenStore = func(ctx context.Context) (*leasestore.Store, error) {
		s, err := leasestore.Open(ctx, g.Store, g.Namespace)
		var urlErr *leasestore.URLError
		var nsErr *leasestore.NamespaceError
		if errors.As(err, &urlErr) || errors.As(err, &nsErr) {
			return nil, usageError(err)
		}
		return s, err
	}
	f.Outbox = func() *outbox.Box {
		dir, err := leasestore.StateDir()
		if err != nil {
			return nil
		}
		return outbox.Open(dir, g.Store, g.Namespace)
	}
	return f
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
		// cobra's own --version line, "leasectl version VERSION": `leasectl
		// version` prints the same (versionLine). No SetVersionTemplate: a
		// template links text/template's reflection, which keeps every
		// exported method in the binary.
		Version: versionDetail(),
	}
	g := f.Globals
	pf := root.PersistentFlags()
	pf.StringVar(&g.Store, "store", envOr("LEASECTL_STORE", ""), "store URL: redis://[user:pass@]host:port[/db], rediss:// (TLS), redis+cluster://, etcd://host:2379[,host2:2379], postgres://[user@]host[:port]/db[?sslmode=...], https://registry:port (leasectl serve, with $LEASECTL_TOKEN), or file:///dir; default: the embedded store in $XDG_STATE_HOME/leasectl [$LEASECTL_STORE]")
	pf.StringVar(&g.Namespace, "namespace", envOr("LEASECTL_NAMESPACE", "leasectl"), "namespace of the store's keys, to share one store between teams [$LEASECTL_NAMESPACE]")
	pf.StringVar(&g.LogLevel, "log-level", envOr("LEASECTL_LOG_LEVEL", defaultLogLevel), "log level: trace, debug, info, warn, error [$LEASECTL_LOG_LEVEL]")
	pf.CountVarP(&g.Verbose, "verbose", "v", "log more: -v the run's lifecycle (info), -vv details (debug)")
	pf.StringVar(&g.LogFormat, "log-format", envOr("LEASECTL_LOG_FORMAT", "auto"), "log format: auto (console, in colour on a terminal), console, json [$LEASECTL_LOG_FORMAT]")
	root.SetFlagErrorFunc(flagError)
	completeGlobalFlags(root)

	root.AddCommand(
		NewCmdVersion(f),
		NewCmdRun(f, nil),
		NewCmdScan(f, nil),
		NewCmdQuarantine(f),
		NewCmdStop(f, nil),
		NewCmdExpect(f, nil),
		NewCmdStatus(f, nil),
		NewCmdLs(f, nil),
		NewCmdToken(f),
		NewCmdStore(f),
		NewCmdServe(f, nil),
	)
	addCompletion(root, f.IO.Out)
	showDefaults(root)
	return root
}

// Execute runs leasectl with the process's arguments and returns its exit
// code. The watchdog that `run` re-executes when the small leasectl-watchdog
// is not installed beside it is dispatched before anything else is built:
// it starts once per run, and needs neither the command tree nor the
// terminal checks.
func Execute() int {
	if len(os.Args) == 2 && os.Args[1] == watchdog.Arg {
		return watchdog.Main()
	}
	f := NewFactory()
	root := NewCmdRoot(f)
	return f.report(root.ExecuteContext(context.Background()))
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
