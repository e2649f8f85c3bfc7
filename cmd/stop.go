package cmd

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/leasectl/leasectl/inspect"
	"github.com/leasectl/leasectl/leasestore"
)

// NewCmdStop builds `leasectl stop JOB --reason TEXT`. runF, when not nil,
// replaces the command's work, so a test can stop after flag parsing.
func NewCmdStop(f *Factory, runF func(*QuarantineOptions) error) *cobra.Command {
	opts := newQuarantineOptions(f)
	c := &cobra.Command{
		Use:   "stop JOB --reason TEXT",
		Short: "Stop a job's running child, wherever it runs",
		Long: `Ask the run that holds JOB to stop its child, on whatever host it runs, without
a shell there. The holder learns it at its next renewal (within --heartbeat,
ttl/3 by default), sends SIGTERM to the child's process group and SIGKILL
after its --grace, and releases the job as failed, stopped by you: no crash is
counted, and its 'leasectl run' exits 80. The job stays held until then, so a
--wait run does not take it while it is being stopped. The request is
recorded in the job's history with who asked (user@hostname) and why.

A job with no live lease is left alone: one line on stderr says so and the
exit status is 1. Through a registry, the operator role is needed.

Confirmation goes to stderr; --json prints
{"job", "action": "stop-requested", "by", "reason", "at"} on stdout.

Exit status: 0 asked, 1 not running, 64 for a bad job ID or a missing
--reason, 69 if the store is unreachable, 79 if a registry refuses it to the
token's role (it needs the operator role).`,
		Example:           `  leasectl stop nightly-report --reason "runaway query on the primary (INC-1236)"`,
		Args:              jobArg(opts),
		ValidArgsFunction: completeOneJob(f, leasedJobs),
		RunE: func(c *cobra.Command, _ []string) error {
			if opts.Reason == "" {
				return usageError(errors.New("stop: --reason is required: say why, for the job's history and the holder's log"))
			}
			opts.By = operator()
			if runF != nil {
				return runF(opts)
			}
			return stopRun(c.Context(), opts)
		},
	}
	c.Flags().StringVar(&opts.Reason, "reason", "", "why, for the job's history and the holder's log (required)")
	c.Flags().BoolVar(&opts.JSON, "json", false, jsonFlagHelp)
	return c
}

func stopRun(ctx context.Context, opts *QuarantineOptions) error {
	return withStore(ctx, opts.OpenStore, func(ctx context.Context, s *leasestore.Store) error {
		err := s.Stop(ctx, opts.Job, leasestore.Note{By: opts.By, Reason: opts.Reason})
		if errors.Is(err, leasestore.ErrNotRunning) {
			return exitWith(exitFailure, fmt.Errorf("job %q is not running: nothing to stop", opts.Job))
		}
		if err != nil {
			return fmt.Errorf("stop job %q: %w", opts.Job, err)
		}
		return printer(opts.IO, opts.JSON, opts.Now()).Action(inspect.Action{
			Job: opts.Job, Action: inspect.ActionStopRequested, By: opts.By, Reason: opts.Reason, At: opts.Now(),
		})
	})
}
