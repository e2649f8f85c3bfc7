package cmd

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasectl/leasectl/leasestore"
)

// completionExample shows how to install the scripts by hand; the deb and rpm
// packages install them already.
const completionExample = `  # bash, in the current shell:
  source <(leasectl completion bash)
  # bash, in every new shell: add that line to ~/.bashrc (with the
  # bash-completion package, /etc/bash_completion.d/leasectl works too)
  # zsh:
  leasectl completion zsh > "${fpath[1]}/_leasectl"
  # fish:
  leasectl completion fish > ~/.config/fish/completions/leasectl.fish`

// bashCompletionHelp replaces cobra's, which says the script needs the
// bash-completion package: leasectl's does not.
const bashCompletionHelp = `Generate the completion script for bash. It works with bash alone; with the
bash-completion package it also understands quoted words.

In the current shell:

	source <(leasectl completion bash)

In every new shell, add that line to ~/.bashrc. The deb and rpm packages
install the script where the bash-completion package loads it.`

// addCompletion adds cobra's own `completion bash|zsh|fish|powershell`
// command now, rather than when it runs, so that its help carries an
// example and its bash script works without the bash-completion package.
// Cobra binds the scripts' output when it adds the command, so the root's
// output is set to out first. Call it after every other command has been
// added.
func addCompletion(root *cobra.Command, out io.Writer) {
	root.SetOut(out)
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Example = completionExample
		c.Args = subcommandRequired
		c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		for _, shell := range c.Commands() {
			if shell.Name() == "bash" {
				shell.Long = bashCompletionHelp
				shell.RunE = func(c *cobra.Command, _ []string) error {
					noDesc, _ := c.Flags().GetBool("no-descriptions")
					return bashCompletion(c.Root(), out, !noDesc)
				}
			}
		}
	}
}

// cobraWordsByRef is how cobra's bash script (V2) splits the command line
// when the bash-completion package is missing: with that package's own
// _get_comp_words_by_ref, which is then missing too.
const cobraWordsByRef = `    COMPREPLY=()
    _get_comp_words_by_ref "$@" cur prev words cword
`

// bashWordsByRef stands in for it without the package: the words up to the
// cursor, split at blanks only, so that a job ID keeps its = and : (which
// bash itself splits at); quotes are not interpreted.
const bashWordsByRef = `    COMPREPLY=()
    if declare -F _get_comp_words_by_ref >/dev/null 2>&1; then
        _get_comp_words_by_ref "$@" cur prev words cword
        return
    fi
    local line=${COMP_LINE:0:COMP_POINT}
    read -ra words <<< "$line"
    if [[ -z $line || $line == *[[:blank:]] ]]; then
        words+=("")
    fi
    cword=$(( ${#words[@]} - 1 ))
    cur=${words[cword]}
    prev=${words[cword-1]}
`

// bashCompletion writes cobra's bash script with bashWordsByRef in place of
// cobraWordsByRef.
func bashCompletion(root *cobra.Command, out io.Writer, withDesc bool) error {
	var b bytes.Buffer
	if err := root.GenBashCompletionV2(&b, withDesc); err != nil {
		return err
	}
	_, err := io.WriteString(out, strings.Replace(b.String(), cobraWordsByRef, bashWordsByRef, 1))
	return err
}

// completionTimeout bounds the store lookups of a completion: a TAB must
// not hang on a store that does not answer.
const completionTimeout = 2 * time.Second

// completionLimit bounds the job IDs a completion offers: more than a
// shell shows usefully.
const completionLimit = 1000

// jobSet is which jobs a completion offers.
type jobSet int

const (
	leasedJobs      jobSet = 1 << iota // holding a lease (what leasectl ls lists)
	quarantinedJobs                    // in quarantine
	idleJobs                           // the other jobs the store knows
	// knownJobs: every job the store knows, those leased or quarantined
	// described as such.
	knownJobs = leasedJobs | quarantinedJobs | idleJobs
)

// completeJobs completes a job ID with the jobs of set, as the store knows
// them now, starting with what was typed. Nothing is offered when the
// store cannot be asked.
func completeJobs(f *Factory, set jobSet) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		ctx, cancel := context.WithTimeout(c.Context(), completionTimeout)
		defer cancel()
		s, err := f.OpenStore(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer s.Close()
		described := map[string]string{}
		var jobs []string
		if set&leasedJobs != 0 {
			if leases, err := s.Leases(ctx); err == nil {
				for _, h := range leases {
					described[h.Job] = "leased by " + h.Worker
					jobs = append(jobs, h.Job)
				}
			}
		}
		if set&quarantinedJobs != 0 {
			if qs, err := s.Quarantined(ctx); err == nil {
				for _, q := range qs {
					described[q.Job] = "quarantined: " + q.Reason
					jobs = append(jobs, q.Job)
				}
			}
		}
		if set&idleJobs != 0 {
			if known, err := s.Jobs(ctx, toComplete, completionLimit); err == nil {
				jobs = append(jobs, known...)
			}
		}
		slices.Sort(jobs)
		var offered []string
		for _, job := range slices.Compact(jobs) {
			if !strings.HasPrefix(job, toComplete) {
				continue
			}
			if d := described[job]; d != "" {
				job += "\t" + d
			}
			offered = append(offered, job)
		}
		return offered, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeOneJob completes the JOB argument of a command that takes one.
func completeOneJob(f *Factory, set jobSet) cobra.CompletionFunc {
	jobs := completeJobs(f, set)
	return func(c *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return jobs(c, args, toComplete)
	}
}

// completeGlobalFlags completes the values of the global flags that take
// one of a few: the log level and format, and the store URL's scheme.
func completeGlobalFlags(root *cobra.Command) {
	fixed := func(values ...string) cobra.CompletionFunc {
		return cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)
	}
	_ = root.RegisterFlagCompletionFunc("log-level", fixed("trace", "debug", "info", "warn", "error"))
	_ = root.RegisterFlagCompletionFunc("log-format", fixed("auto", "console", "json"))
	_ = root.RegisterFlagCompletionFunc("store", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		schemes := slices.Clone(leasestore.Schemes())
		for i, s := range schemes {
			schemes[i] = s + "://"
		}
		return schemes, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
	})
}
