package cmd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasectl/leasectl/inspect"
	"github.com/leasectl/leasectl/leasestore"
)

// NewCmdToken builds `leasectl token`, the group of fencing token commands.
func NewCmdToken(f *Factory) *cobra.Command {
	c := &cobra.Command{
		Use:   "token <command>",
		Short: "Check fencing tokens",
		Long: `A fencing token rises with every grant of a job's lease. 'token check' tells
whether a token is still the job's current one with a live lease, so a
script can fence its final commit step.`,
		Example: `  # inside 'leasectl run --job nightly -- ./report.sh':
  leasectl token check --job "$LEASECTL_JOB_ID" --token "$LEASECTL_FENCING_TOKEN" && commit-results`,
		Args: subcommandRequired,
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	c.AddCommand(NewCmdTokenCheck(f, nil))
	return c
}

// TokenCheckOptions are `leasectl token check`'s inputs.
type TokenCheckOptions struct {
	IO        *IOStreams
	Now       func() time.Time
	OpenStore func(context.Context) (*leasestore.Store, error)

	Job   string
	Token int64
	JSON  bool
}

// NewCmdTokenCheck builds `leasectl token check --job ID --token N`. runF,
// when not nil, replaces the command's work, so a test can stop after flag
// parsing.
func NewCmdTokenCheck(f *Factory, runF func(*TokenCheckOptions) error) *cobra.Command {
	opts := &TokenCheckOptions{IO: f.IO, Now: f.Now, OpenStore: f.OpenStore}
	c := &cobra.Command{
		Use:   "check --job ID --token N",
		Short: "Exit 0 if a fencing token is the job's current one and its lease is live",
		Long: `Check that N is the job's current fencing token and that its lease is live,
so that a script run by 'leasectl run' can fence its final commit step: a
run that lost its lease, or was overtaken by a newer run, gets exit status 1
and does not commit.

The check is a snapshot: the lease can still be lost right after it. A
downstream that stores the token with the data it writes, and refuses lower
tokens, is safe without that race.

A stale token prints the reason on stderr in one line. A current one prints
nothing when piped, one line on a terminal. --json prints
{"job", "token", "valid", "current_token", "live", "reason"} either way.

Exit status: 0 current and live, 1 stale, 64 bad job ID or token, 69 if the
store is unreachable.`,
		Example: `  # inside 'leasectl run --job nightly -- ./report.sh':
  leasectl token check --job "$LEASECTL_JOB_ID" --token "$LEASECTL_FENCING_TOKEN" && commit-results`,
		Args: func(c *cobra.Command, args []string) error {
			if err := noArgs(c, args); err != nil {
				return err
			}
			return required(c, "job", "token")
		},
		RunE: func(c *cobra.Command, _ []string) error {
			if err := leasestore.ValidateJobID(opts.Job); err != nil {
				return usageError(err)
			}
			if opts.Token <= 0 {
				return usageError(fmt.Errorf("invalid --token %d: fencing tokens are positive", opts.Token))
			}
			if runF != nil {
				return runF(opts)
			}
			return tokenCheckRun(c.Context(), opts)
		},
	}
	c.Flags().StringVar(&opts.Job, "job", "", "job ID")
	c.Flags().Int64Var(&opts.Token, "token", 0, "fencing token to check ($LEASECTL_FENCING_TOKEN inside a run)")
	c.Flags().BoolVar(&opts.JSON, "json", false, jsonFlagHelp)
	_ = c.MarkFlagRequired("job")
	_ = c.RegisterFlagCompletionFunc("job", completeJobs(f, leasedJobs))
	_ = c.MarkFlagRequired("token")
	return c
}

func tokenCheckRun(ctx context.Context, opts *TokenCheckOptions) error {
	var check inspect.TokenCheck
	err := withStore(ctx, opts.OpenStore, func(ctx context.Context, s *leasestore.Store) error {
		var err error
		check, err = inspect.CheckToken(ctx, s, opts.Job, opts.Token)
		return err
	})
	if err != nil {
		return err
	}
	if err := printer(opts.IO, opts.JSON, opts.Now()).TokenCheck(check); err != nil {
		return err
	}
	if !check.Valid {
		return exitWith(exitFailure, errors.New(check.Reason))
	}
	return nil
}

// subcommandRequired refuses an unknown subcommand of a command group with
// a usage error; the group alone prints its help.
func subcommandRequired(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError(fmt.Errorf("unknown command %q for %q", args[0], c.CommandPath()))
	}
	return nil
}
