package cmd

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasectl/leasectl/inspect"
	"github.com/leasectl/leasectl/leasestore"
)

// onCallTimeout bounds each on-call command's work with the store, opening
// included: long enough for a slow store across a WAN, short enough that a
// frozen one gives the operator an answer (exit 69) instead of a hang.
const onCallTimeout = 15 * time.Second

// outputHelp is the part of every on-call command's help that says how it
// writes its results.
const outputHelp = `
Output: a table on a terminal; when piped, one tab-separated line per row
with no header and no trailing empty field, RFC 3339 times and Go durations
(cut -f and awk -F'\t' friendly); --json prints the documented schema (snake_case keys, RFC 3339
times, durations in milliseconds in keys ending in _ms), [] when empty.
An empty result says so in one line, on stderr when piped.`

const jsonFlagHelp = "print JSON (schema: see the inspect package documentation)"

// withStore opens the store, runs fn with it and closes it, all bounded by
// onCallTimeout.
func withStore(ctx context.Context, open func(context.Context) (*leasestore.Store, error), fn func(context.Context, *leasestore.Store) error) (err error) {
	ctx, cancel := context.WithTimeout(ctx, onCallTimeout)
	defer cancel()
	s, err := open(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := s.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close the store: %w", cerr)
		}
	}()
	return fn(ctx, s)
}

// printer returns the Printer for a command's output, its tables fitted
// to the terminal.
func printer(ios *IOStreams, asJSON bool, now time.Time) *inspect.Printer {
	p := &inspect.Printer{Out: ios.Out, ErrOut: ios.ErrOut, Format: inspect.FormatFor(ios.StdoutTTY, asJSON), Now: now}
	if p.Format == inspect.FormatTable && ios.TerminalWidth != nil {
		p.Width = ios.TerminalWidth()
	}
	return p
}

// StatusOptions are `leasectl status`'s inputs.
type StatusOptions struct {
	IO        *IOStreams
	Now       func() time.Time
	OpenStore func(context.Context) (*leasestore.Store, error)

	Job  string
	JSON bool
}

// NewCmdStatus builds `leasectl status JOB`. runF, when not nil, replaces
// the command's work, so a test can stop after flag parsing.
func NewCmdStatus(f *Factory, runF func(*StatusOptions) error) *cobra.Command {
	opts := &StatusOptions{IO: f.IO, Now: f.Now, OpenStore: f.OpenStore}
	c := &cobra.Command{
		Use:   "status JOB",
		Short: "Show a job's state, holder, token, crash count and recent history",
		Long: `Show one job: its state, who holds it and for how long, its fencing token,
its consecutive crashes out of the threshold that quarantines it, how its last
run ended, and its recent history (the last 20 events).

States:
  IDLE         no run holds the lease
  RUNNING      a run holds a live lease
  CRASHED      a run's supervisor vanished: its evidence is there without a
               live lease, or, on the embedded store, its processes are gone
               from this host (the next run or scan counts the crash)
  QUARANTINED  refused until an operator runs 'leasectl quarantine release'

Ages are relative to the store's clock.
` + outputHelp + `

Exit status: 0 whatever the state, 1 if the store has no record of the job
(no lease, token, history or quarantine: never run against this store, or
a typo; one line on stderr says so), 64 for a bad job ID, 69 if the store
is unreachable.`,
		Example: `  leasectl status nightly-report
  leasectl status nightly-report --json | jq -r .state
  leasectl status nightly-report | awk -F'\t' '$1 == "state" {print $2}'`,
		Args:              oneJob,
		ValidArgsFunction: completeOneJob(f, knownJobs),
		RunE: func(c *cobra.Command, args []string) error {
			opts.Job = args[0]
			if runF != nil {
				return runF(opts)
			}
			return statusRun(c.Context(), opts)
		},
	}
	c.Flags().BoolVar(&opts.JSON, "json", false, jsonFlagHelp)
	return c
}

func statusRun(ctx context.Context, opts *StatusOptions) error {
	return withStore(ctx, opts.OpenStore, func(ctx context.Context, s *leasestore.Store) error {
		st, err := s.Status(ctx, opts.Job)
		if err != nil {
			return fmt.Errorf("status of job %q: %w", opts.Job, err)
		}
		if inspect.NeverSeen(st) {
			return exitWith(exitFailure, fmt.Errorf("job %q was never seen by this store: no lease, token, history or quarantine (a typo? leasectl ls lists the running jobs)", opts.Job))
		}
		return printer(opts.IO, opts.JSON, opts.Now()).Status(st)
	})
}
