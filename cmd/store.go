package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/leasectl/leasectl/leasestore"
)

// migrator is a store that keeps its data in a schema of its own, which it
// creates and migrates (the PostgreSQL store). cmd names it by its methods
// alone, so that it imports no driver.
type migrator interface {
	// Migrate creates the schema or brings it to the current version, and
	// returns it and its version before and after.
	Migrate(ctx context.Context) (schema string, from, to int, err error)
	// MigrationSQL is the script Migrate runs, for operators who apply
	// schema changes by hand.
	MigrationSQL() string
}

// NewCmdStore builds `leasectl store`, the group of store administration
// commands.
func NewCmdStore(f *Factory) *cobra.Command {
	c := &cobra.Command{
		Use:   "store <command>",
		Short: "Administer the store",
		Long: `Commands for the people who run the store itself. The PostgreSQL store keeps
its data in a schema named after --namespace, which leasectl creates and
migrates on first use when its role may; 'store migrate' does it ahead of time.`,
		Example: `  LEASECTL_STORE=postgres://owner@db.internal/ops leasectl store migrate`,
		Args:    subcommandRequired,
		RunE:    func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	c.AddCommand(NewCmdStoreMigrate(f, nil))
	return c
}

// StoreMigrateOptions are `leasectl store migrate`'s inputs.
type StoreMigrateOptions struct {
	IO        *IOStreams
	OpenStore func(context.Context) (*leasestore.Store, error)

	SQL  bool
	JSON bool
}

// NewCmdStoreMigrate builds `leasectl store migrate`. runF, when not nil,
// replaces the command's work, so a test can stop after flag parsing.
func NewCmdStoreMigrate(f *Factory, runF func(*StoreMigrateOptions) error) *cobra.Command {
	opts := &StoreMigrateOptions{IO: f.IO, OpenStore: f.OpenStore}
	c := &cobra.Command{
		Use:   "migrate [--sql]",
		Short: "Create or migrate the store's schema (PostgreSQL)",
		Long: `Create the namespace's schema in the PostgreSQL store, or bring it to this
leasectl's version: its tables, and the functions that are the only way
leasectl changes them. It runs in one transaction under an advisory lock, so
it is safe while leasectl runs elsewhere, and safe to run again.

Run it as the role that is to own the schema; the roles leasectl runs as then
need only USAGE on the schema (GRANT USAGE ON SCHEMA leasectl TO ...). Without
it, leasectl migrates on first use, if its role may create the schema.

--sql prints the migration script instead, for operators who apply schema
changes by hand (psql -f); it does not connect. Stores without a schema (the
embedded store, Redis) have nothing to migrate. --json prints
{"schema", "from_version", "to_version"}.

Exit status: 0 migrated or already current, 64 usage, 69 if the store is
unreachable, refuses the migration (missing rights) or has a schema newer
than this leasectl.`,
		Example: `  leasectl store migrate --store postgres://owner@db.internal/ops
  leasectl store migrate --store postgres://db.internal/ops --namespace team-a --sql > team-a.sql`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return storeMigrateRun(c.Context(), opts)
		},
	}
	c.Flags().BoolVar(&opts.SQL, "sql", false, "print the migration script instead of running it")
	c.Flags().BoolVar(&opts.JSON, "json", false, jsonFlagHelp)
	return c
}

func storeMigrateRun(ctx context.Context, opts *StoreMigrateOptions) error {
	return withStore(ctx, opts.OpenStore, func(ctx context.Context, s *leasestore.Store) error {
		m, ok := s.Driver().(migrator)
		if !ok {
			_, err := fmt.Fprintln(opts.IO.ErrOut, "this store keeps no schema: nothing to migrate")
			return err
		}
		if opts.SQL {
			_, err := io.WriteString(opts.IO.Out, m.MigrationSQL())
			return err
		}
		schema, from, to, err := m.Migrate(ctx)
		if err != nil {
			return err
		}
		if opts.JSON {
			return json.NewEncoder(opts.IO.Out).Encode(struct {
				Schema string `json:"schema"`
				From   int    `json:"from_version"`
				To     int    `json:"to_version"`
			}{schema, from, to})
		}
		if from == to {
			_, err = fmt.Fprintf(opts.IO.Out, "schema %q is at version %d: nothing to migrate\n", schema, to)
		} else {
			_, err = fmt.Fprintf(opts.IO.Out, "schema %q migrated from version %d to %d\n", schema, from, to)
		}
		return err
	})
}
