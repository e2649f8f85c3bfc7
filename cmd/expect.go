package cmd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasectl/leasectl/inspect"
	"github.com/leasectl/leasectl/leasestore"
)

// expectFlags reads run's --expect-every and --expect-grace into *x: nil
// when --expect-every is not given, which --expect-grace then cannot be.
func expectFlags(fl *pflag.FlagSet, x **leasestore.Expectation) error {
	every, _ := fl.GetDuration("expect-every")
	grace, _ := fl.GetDuration("expect-grace")
	switch {
	case !fl.Changed("expect-every") && fl.Changed("expect-grace"):
		return usageError(errors.New("--expect-grace needs --expect-every: the grace is added to its period"))
	case !fl.Changed("expect-every"):
		return nil
	}
	*x = &leasestore.Expectation{Every: every, Grace: grace}
	if err := (*x).Validate(); err != nil {
		return usageError(fmt.Errorf("--expect-every %s --expect-grace %s: %w", every, grace, err))
	}
	return nil
}

// ExpectOptions are the flags and argument of `leasectl expect`.
type ExpectOptions struct {
	*QuarantineOptions
	Every, Grace time.Duration
	Clear        bool
}

// NewCmdExpect builds `leasectl expect JOB --every D [--grace D] | --clear`.
// runF, when not nil, replaces the command's work, so a test can stop after
// flag parsing.
func NewCmdExpect(f *Factory, runF func(*ExpectOptions) error) *cobra.Command {
	opts := &ExpectOptions{QuarantineOptions: newQuarantineOptions(f)}
	c := &cobra.Command{
		Use:   "expect JOB --every D [--grace D] | --clear",
		Short: "Say how often a job must succeed, or it is overdue",
		Long: `Set JOB's expectation: it must complete successfully at least every D, or it
is overdue once its last success (or, if it never succeeded, the time the
expectation was set) is more than --every plus --grace ago by the store's
clock. Overdue jobs are listed by scan (--fail-on overdue makes it exit 81),
marked by ls and status, and exported as leasectl_job_overdue by the reaper's
metrics: a job that silently stopped running (a cron line deleted, a host
gone, a timer disabled) is noticed like one that crashed.

A run sets the same with 'leasectl run --expect-every D'; the last one set
wins. Setting the period and grace the job has already keeps the time it
was set. --clear removes it; on a job without one it changes and records
nothing, and answers expectation-cleared all the same (the job has none).
Each change is recorded in the job's history with who (user@hostname) and
why. Through a registry, the operator role is needed.

Confirmation goes to stderr; --json prints
{"job", "action": "expectation-set" | "expectation-cleared", "by", "reason", "at"}
on stdout.

Exit status: 0 done, 64 for a bad job ID or flag, 69 if the store is
unreachable, 79 if a registry refuses it to the token's role (it needs the
operator role).`,
		Example: `  leasectl expect nightly-report --every 24h --grace 1h --reason "the report is due by 7:00"
  leasectl expect nightly-report --clear --reason "retired"`,
		Args:              jobArg(opts.QuarantineOptions),
		ValidArgsFunction: completeOneJob(f, knownJobs),
		RunE: func(c *cobra.Command, _ []string) error {
			fl := c.Flags()
			switch {
			case opts.Clear && (fl.Changed("every") || fl.Changed("grace")):
				return usageError(errors.New("expect: --clear takes no --every or --grace"))
			case !opts.Clear && !fl.Changed("every"):
				return usageError(errors.New("expect: give --every D (and --grace D), or --clear"))
			case !opts.Clear:
				x := leasestore.Expectation{Every: opts.Every, Grace: opts.Grace}
				if err := x.Validate(); err != nil {
					return usageError(fmt.Errorf("expect: --every %s --grace %s: %w", opts.Every, opts.Grace, err))
				}
			}
			opts.By = operator()
			if runF != nil {
				return runF(opts)
			}
			return expectRun(c.Context(), opts)
		},
	}
	c.Flags().DurationVar(&opts.Every, "every", 0, "the job must complete successfully at least this often")
	c.Flags().DurationVar(&opts.Grace, "grace", 0, "how late a success may be before the job is overdue")
	c.Flags().BoolVar(&opts.Clear, "clear", false, "remove the job's expectation")
	c.Flags().StringVar(&opts.Reason, "reason", "", "why, for the job's history")
	c.Flags().BoolVar(&opts.JSON, "json", false, jsonFlagHelp)
	return c
}

func expectRun(ctx context.Context, opts *ExpectOptions) error {
	var x *leasestore.Expectation
	action := inspect.ActionExpectationCleared
	if !opts.Clear {
		x = &leasestore.Expectation{Every: opts.Every, Grace: opts.Grace}
		action = inspect.ActionExpectationSet
	}
	return withStore(ctx, opts.OpenStore, func(ctx context.Context, s *leasestore.Store) error {
		if err := s.Expect(ctx, opts.Job, x, leasestore.Note{By: opts.By, Reason: opts.Reason}); err != nil {
			return fmt.Errorf("expect job %q: %w", opts.Job, err)
		}
		return printer(opts.IO, opts.JSON, opts.Now()).Action(inspect.Action{
			Job: opts.Job, Action: action, By: opts.By, Reason: opts.Reason, At: opts.Now(), Expect: x,
		})
	})
}
