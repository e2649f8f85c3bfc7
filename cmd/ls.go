package cmd

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasectl/leasectl/leasestore"
)

// LsOptions are `leasectl ls`'s inputs.
type LsOptions struct {
	IO        *IOStreams
	Now       func() time.Time
	OpenStore func(context.Context) (*leasestore.Store, error)

	JSON bool
}

// NewCmdLs builds `leasectl ls`. runF, when not nil, replaces the command's
// work, so a test can stop after flag parsing.
func NewCmdLs(f *Factory, runF func(*LsOptions) error) *cobra.Command {
	opts := &LsOptions{IO: f.IO, Now: f.Now, OpenStore: f.OpenStore}
	c := &cobra.Command{
		Use:   "ls",
		Short: "List the leases held now",
		Long: `List the leases held now, ordered by job: the job, the worker and host
holding it, its fencing token, how long it has been running and how long its
lease has left before it expires unless renewed. A lease of a job past its
expectation (leasectl expect) is marked overdue; overdue jobs that are not
running are counted in one line on stderr.
` + outputHelp + `

Exit status: 0 whether leases are held or not, 64 for bad flags or
arguments, 69 if the store is unreachable.`,
		Example: `  leasectl ls
  leasectl ls | cut -f1          # the jobs running now
  leasectl ls --json | jq -r '.[] | select(.host == "db-1") | .job'`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return lsRun(c.Context(), opts)
		},
	}
	c.Flags().BoolVar(&opts.JSON, "json", false, jsonFlagHelp)
	return c
}

func lsRun(ctx context.Context, opts *LsOptions) error {
	return withStore(ctx, opts.OpenStore, func(ctx context.Context, s *leasestore.Store) error {
		leases, err := s.Leases(ctx)
		if err != nil {
			return fmt.Errorf("list leases: %w", err)
		}
		// Marking overdue jobs is a bonus: a store that cannot list them (a
		// registry older than expectations) still gets its leases listed.
		overdue, err := s.Overdue(ctx)
		if err != nil {
			fmt.Fprintf(opts.IO.ErrOut, "could not mark overdue jobs: %v\n", err)
		}
		return printer(opts.IO, opts.JSON, opts.Now()).Leases(leases, overdue)
	})
}
