package cmd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasectl/leasectl/inspect"
	"github.com/leasectl/leasectl/leasestore"
)

// NewCmdQuarantine builds `leasectl quarantine`, the group of quarantine
// commands.
func NewCmdQuarantine(f *Factory) *cobra.Command {
	c := &cobra.Command{
		Use:   "quarantine <command>",
		Short: "List, show, release and add quarantined jobs",
		Long: `A job that crashes --max-crashes times in a row (its supervisor vanished, or
its child died of a signal that says it crashed, such as SIGSEGV) is quarantined:
'leasectl run' refuses it with exit status 76 until an operator releases it.
An operator can also quarantine a job by hand, as a kill switch.`,
		Example: `  leasectl quarantine list
  leasectl quarantine show nightly-report
  leasectl quarantine release nightly-report --reason "bad row removed (INC-1234)"
  leasectl quarantine add billing-sync --reason "upstream API returns garbage (INC-1235)"`,
		Args: subcommandRequired,
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	c.AddCommand(
		NewCmdQuarantineList(f, nil),
		NewCmdQuarantineShow(f, nil),
		NewCmdQuarantineRelease(f, nil),
		NewCmdQuarantineAdd(f, nil),
	)
	return c
}

// QuarantineOptions are the inputs of the quarantine commands and of stop:
// an operator's action on a job.
type QuarantineOptions struct {
	IO        *IOStreams
	Now       func() time.Time
	OpenStore func(context.Context) (*leasestore.Store, error)

	Job    string // show, release, add
	Reason string // release, add
	// By names the operator in the records: user@hostname (see operator).
	By   string
	JSON bool
}

func newQuarantineOptions(f *Factory) *QuarantineOptions {
	return &QuarantineOptions{IO: f.IO, Now: f.Now, OpenStore: f.OpenStore}
}

// operator names who runs this process, for the quarantine records: $USER,
// else $LOGNAME (cron sets only that), else the name of the process's user
// ID (a service or a container may set neither), else "uid N"; with the
// host. It is asked only by the commands that record it, not at start-up.
func operator() string {
	host, _ := os.Hostname()
	name := cmp.Or(os.Getenv("USER"), os.Getenv("LOGNAME"))
	if name == "" {
		if u, err := user.Current(); err == nil && u.Username != "" {
			name = u.Username
		} else {
			name = "uid " + strconv.Itoa(os.Getuid())
		}
	}
	return inspect.Operator(name, host)
}

// NewCmdQuarantineList builds `leasectl quarantine list`. runF, when not
// nil, replaces the command's work, so a test can stop after flag parsing.
func NewCmdQuarantineList(f *Factory, runF func(*QuarantineOptions) error) *cobra.Command {
	opts := newQuarantineOptions(f)
	c := &cobra.Command{
		Use:   "list",
		Short: "List quarantined jobs with their evidence",
		Long: `List the quarantined jobs, ordered by job: consecutive crashes, the last
worker and host that ran them, since when, why, and by whom ("leasectl" when
quarantined for crashing, else the operator).
` + outputHelp + `

Exit status: 0 whether jobs are quarantined or not, 64 for bad flags or
arguments, 69 if the store is unreachable.`,
		Example: `  leasectl quarantine list
  leasectl quarantine list --json | jq -r '.[].job'`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return quarantineListRun(c.Context(), opts)
		},
	}
	c.Flags().BoolVar(&opts.JSON, "json", false, jsonFlagHelp)
	return c
}

func quarantineListRun(ctx context.Context, opts *QuarantineOptions) error {
	return withStore(ctx, opts.OpenStore, func(ctx context.Context, s *leasestore.Store) error {
		qs, err := s.Quarantined(ctx)
		if err != nil {
			return fmt.Errorf("list quarantined jobs: %w", err)
		}
		return printer(opts.IO, opts.JSON, opts.Now()).Quarantines(qs)
	})
}

// jobArg validates the JOB argument of a quarantine command into opts.
func jobArg(opts *QuarantineOptions) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if err := oneJob(c, args); err != nil {
			return err
		}
		opts.Job = args[0]
		return nil
	}
}

// NewCmdQuarantineShow builds `leasectl quarantine show JOB`. runF, when not
// nil, replaces the command's work, so a test can stop after flag parsing.
func NewCmdQuarantineShow(f *Factory, runF func(*QuarantineOptions) error) *cobra.Command {
	opts := newQuarantineOptions(f)
	c := &cobra.Command{
		Use:   "show JOB",
		Short: "Show why a job is quarantined, with its recent history",
		Long: `Show one quarantined job: since when, by whom and why, its consecutive
crashes out of its threshold, the last worker and host that ran it, and its
recent history. 'leasectl status JOB' shows any job, quarantined or not.
` + outputHelp + `

Exit status: 0 quarantined, 1 not quarantined (one line on stderr says so),
64 for a bad job ID, 69 if the store is unreachable.`,
		Example:           `  leasectl quarantine show nightly-report`,
		Args:              jobArg(opts),
		ValidArgsFunction: completeOneJob(f, quarantinedJobs),
		RunE: func(c *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return quarantineShowRun(c.Context(), opts)
		},
	}
	c.Flags().BoolVar(&opts.JSON, "json", false, jsonFlagHelp)
	return c
}

func quarantineShowRun(ctx context.Context, opts *QuarantineOptions) error {
	return withStore(ctx, opts.OpenStore, func(ctx context.Context, s *leasestore.Store) error {
		st, err := s.Status(ctx, opts.Job)
		if err != nil {
			return fmt.Errorf("status of job %q: %w", opts.Job, err)
		}
		if st.Quarantine == nil {
			return exitWith(exitFailure, fmt.Errorf("job %q is not quarantined (state %s)", opts.Job, st.State))
		}
		return printer(opts.IO, opts.JSON, opts.Now()).Quarantine(st)
	})
}

// defaultReleaseReason is recorded when `quarantine release` gets no
// --reason.
const defaultReleaseReason = "released by an operator"

// NewCmdQuarantineRelease builds `leasectl quarantine release JOB`. runF,
// when not nil, replaces the command's work, so a test can stop after flag
// parsing.
func NewCmdQuarantineRelease(f *Factory, runF func(*QuarantineOptions) error) *cobra.Command {
	opts := newQuarantineOptions(f)
	c := &cobra.Command{
		Use:   "release JOB [--reason TEXT]",
		Short: "Let a quarantined job run again and reset its crash count",
		Long: `Release a job from quarantine: 'leasectl run' accepts it again and its
consecutive crash count starts from zero. The release is recorded in the job's
history with who did it (user@hostname: $USER, else $LOGNAME, else the name
of the user ID) and why.

A job that is not quarantined is left alone: one line on stderr says so and
the exit status is 1, so that a script notices a wrong job name or a release
someone else already did.

Confirmation goes to stderr; --json prints
{"job", "action": "released", "by", "reason", "at"} on stdout.

Exit status: 0 released, 1 not quarantined, 64 for a bad job ID, 69 if the
store is unreachable, 79 if a registry refuses it to the token's role (it
needs the operator role).`,
		Example:           `  leasectl quarantine release nightly-report --reason "fixed the bad input file (INC-1234)"`,
		Args:              jobArg(opts),
		ValidArgsFunction: completeOneJob(f, quarantinedJobs),
		RunE: func(c *cobra.Command, _ []string) error {
			opts.By = operator()
			if runF != nil {
				return runF(opts)
			}
			return quarantineReleaseRun(c.Context(), opts)
		},
	}
	c.Flags().StringVar(&opts.Reason, "reason", defaultReleaseReason, "why, for the job's history")
	c.Flags().BoolVar(&opts.JSON, "json", false, jsonFlagHelp)
	return c
}

func quarantineReleaseRun(ctx context.Context, opts *QuarantineOptions) error {
	return withStore(ctx, opts.OpenStore, func(ctx context.Context, s *leasestore.Store) error {
		err := s.ReleaseQuarantine(ctx, opts.Job, leasestore.Note{By: opts.By, Reason: opts.Reason})
		if errors.Is(err, leasestore.ErrNotQuarantined) {
			return exitWith(exitFailure, fmt.Errorf("job %q is not quarantined", opts.Job))
		}
		if err != nil {
			return fmt.Errorf("release job %q from quarantine: %w", opts.Job, err)
		}
		recordNotice(ctx, opts.IO, s, leasestore.QuarantineNotice(opts.Job, true, leasestore.Note{By: opts.By, Reason: opts.Reason}, opts.Now()))
		return printer(opts.IO, opts.JSON, opts.Now()).Action(inspect.Action{
			Job: opts.Job, Action: inspect.ActionReleased, By: opts.By, Reason: opts.Reason, At: opts.Now(),
		})
	})
}

// NewCmdQuarantineAdd builds `leasectl quarantine add JOB --reason TEXT`.
// runF, when not nil, replaces the command's work, so a test can stop after
// flag parsing.
func NewCmdQuarantineAdd(f *Factory, runF func(*QuarantineOptions) error) *cobra.Command {
	opts := newQuarantineOptions(f)
	c := &cobra.Command{
		Use:   "add JOB --reason TEXT",
		Short: "Quarantine a job by hand: a kill switch that 'leasectl run' obeys",
		Long: `Quarantine a job by an operator's decision: from now on 'leasectl run' refuses
it with exit status 76, on every host that shares the store, until
'leasectl quarantine release'. A run already going is not stopped. The job
need not exist yet. Adding a quarantined job again replaces its reason.

Confirmation goes to stderr; --json prints
{"job", "action": "quarantined", "by", "reason", "at"} on stdout.

Exit status: 0 quarantined, 64 for a bad job ID or a missing --reason, 69 if
the store is unreachable, 79 if a registry refuses it to the token's role (it
needs the operator role).`,
		Example:           `  leasectl quarantine add billing-sync --reason "upstream API returns garbage (INC-1234)"`,
		Args:              jobArg(opts),
		ValidArgsFunction: completeOneJob(f, knownJobs),
		RunE: func(c *cobra.Command, _ []string) error {
			if opts.Reason == "" {
				return usageError(errors.New("quarantine add: --reason is required: say why, for the on-call after you"))
			}
			opts.By = operator()
			if runF != nil {
				return runF(opts)
			}
			return quarantineAddRun(c.Context(), opts)
		},
	}
	c.Flags().StringVar(&opts.Reason, "reason", "", "why, for the job's history and the refusal message (required)")
	c.Flags().BoolVar(&opts.JSON, "json", false, jsonFlagHelp)
	return c
}

func quarantineAddRun(ctx context.Context, opts *QuarantineOptions) error {
	return withStore(ctx, opts.OpenStore, func(ctx context.Context, s *leasestore.Store) error {
		if err := s.Quarantine(ctx, opts.Job, leasestore.Note{By: opts.By, Reason: opts.Reason}); err != nil {
			return fmt.Errorf("quarantine job %q: %w", opts.Job, err)
		}
		recordNotice(ctx, opts.IO, s, leasestore.QuarantineNotice(opts.Job, false, leasestore.Note{By: opts.By, Reason: opts.Reason}, opts.Now()))
		return printer(opts.IO, opts.JSON, opts.Now()).Action(inspect.Action{
			Job: opts.Job, Action: inspect.ActionQuarantined, By: opts.By, Reason: opts.Reason, At: opts.Now(),
		})
	})
}
