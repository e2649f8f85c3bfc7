package cmd

import (
	"fmt"

	"github.com/spf13/cobra"
)

// NewCmdVersion builds `leasectl version`.
func NewCmdVersion(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print leasectl's version, commit and build date",
		Example: "  leasectl version",
		Args:    noArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(f.IO.Out, versionLine())
			return err
		},
	}
}

// versionLine is what `leasectl version` and `leasectl --version` print.
func versionLine() string { return "leasectl version " + versionDetail() }

// versionDetail is the version, commit and build date.
func versionDetail() string { return fmt.Sprintf("%s (commit %s, built %s)", version, commit, date) }
